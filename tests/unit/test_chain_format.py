"""The chain's format (docs/chain.md): the worked examples' values (a record, a checkpoint), and
canonical JSON's rules.
The SQL functions that write the chain are held to the same values by the integration tests
(a verifier written from the document agrees with every chain a real run writes)."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from gapless.ops.chain import canonical_json, genesis, message_sha256, record_hash
from gapless.ops.checkpoints import (
    checkpoint_body,
    file_bytes,
    file_name,
    fingerprint,
    sign,
    signed_bytes,
    verified_body,
)

MESSAGE = ('{"invoice_id": "shop-1", "lines": [{"unit_price": "10.00", "quantity": 2.50}], '
           '"customer": {"name": "Örnek \\"Ltd\\"\\n"}}')


def test_the_worked_example_of_docs_chain_md() -> None:
    first = genesis("acme", "ABC", "2026")
    assert first == "ac33eb5d7e8dbba44d0583813d2b57b972b9aa95a6bdee7f926fddde02bd2ebf"
    message = message_sha256(MESSAGE)
    assert message == "29986299c051ada87ae01176a4db9e6077178aa1055f83f8dd0b33ae48b0509c"
    record = {"seq": 1, "kind": "seal", "tenant": "acme", "series": "ABC", "period_key": "2026",
              "reserved_no": 1, "number": "ABC2026000000001", "invoice_id": "shop-1",
              "uuid": "8f14e45f-ceea-467f-a8f6-8b1c2d3e4f50", "message_sha256": message,
              "document_sha256": None, "ref": None, "reason": None,
              "at": "2026-11-25T09:03:07.120400Z", "migrated": False}
    assert record_hash("gapless-chain/1", first, record) == \
        "3e58da7a4ca7fa4b55633884699f8df2ec40b5eebc36986453c5acf177adc0ce"


def test_canonical_json_escapes_exactly_what_the_format_says() -> None:
    text = "\"\\\b\f\n\r\t\x01\x1f/\x7fé€𝄞"
    assert canonical_json(text) == '"\\"\\\\\\b\\f\\n\\r\\t\\u0001\\u001f/\x7fé€𝄞"'
    assert canonical_json({"b": 1, "a": [True, None], "é": {}, "Z": []}) == \
        '{"Z":[],"a":[true,null],"b":1,"é":{}}'


def test_numbers_are_plain_decimals_without_trailing_zeros() -> None:
    parsed = json.loads("[1.50, 1e3, 2.0, -0.0, 0.00010, -12, 1E-7]", parse_float=Decimal)
    assert canonical_json(parsed) == "[1.5,1000,2,0,0.0001,-12,0.0000001]"


# ------------------------------------------------------------------ checkpoints (docs/chain.md)
# The test key pair is RFC 8032's Ed25519 test vector 1 (section 7.1, "TEST 1"): published,
# never to sign a real checkpoint.
TEST_SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
TEST_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
TEST_PRIVATE_PEM = """-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g
-----END PRIVATE KEY-----
"""
TEST_PUBLIC_PEM = """-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=
-----END PUBLIC KEY-----
"""
KEY_FINGERPRINT = "21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9"
SIGNED = ('{"at":"2026-11-25T18:00:00.000000Z","chains":[{"head_hash":'
          '"3e58da7a4ca7fa4b55633884699f8df2ec40b5eebc36986453c5acf177adc0ce","head_seq":1,'
          '"last_no":1,"last_number":"ABC2026000000001","period_key":"2026","series":"ABC",'
          '"tenant":"acme"}],"format":"gapless-chain-checkpoint/1","key":'
          '"21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9"}')
SIGNATURE = ("2T06XQlASPMbh5Y/yOuhw3eAfUCRy6ibH7UyPYSBwPwR+trCerkRphul0YL5ACamq+VFoXvCrw/KoKSlHu8"
             "zAg==")
DOC = (Path(__file__).resolve().parents[2] / "docs" / "chain.md").read_text(encoding="utf-8")


def test_the_checkpoint_worked_example_of_docs_chain_md() -> None:
    key = load_pem_private_key(TEST_PRIVATE_PEM.encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    assert key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()).hex() == TEST_SEED
    public = key.public_key()
    assert public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex() == TEST_PUBLIC
    assert public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode() == \
        TEST_PUBLIC_PEM
    assert fingerprint(public) == KEY_FINGERPRINT
    assert hashlib.sha256(bytes.fromhex(TEST_PUBLIC)).hexdigest() == KEY_FINGERPRINT
    body = checkpoint_body([{
        "tenant": "acme", "series": "ABC", "period_key": "2026", "last_no": 1,
        "last_number": "ABC2026000000001", "head_seq": 1,
        "head_hash": "3e58da7a4ca7fa4b55633884699f8df2ec40b5eebc36986453c5acf177adc0ce"}],
        datetime(2026, 11, 25, 18, tzinfo=UTC), KEY_FINGERPRINT)
    assert signed_bytes(body) == SIGNED.encode()
    assert len(SIGNED.encode()) == 348
    envelope = sign(body, key)  # Ed25519 signatures are deterministic
    assert envelope["signature"] == SIGNATURE
    text = file_bytes(envelope).decode()
    assert text == '{"checkpoint":' + SIGNED + ',"signature":"' + SIGNATURE + '"}\n'
    assert file_name(body["at"]) == "checkpoint-2026-11-25T18-00-00.000000Z.json"
    # Checked as an auditor would, from the raw public key alone.
    Ed25519PublicKey.from_public_bytes(bytes.fromhex(TEST_PUBLIC)).verify(
        base64.b64decode(SIGNATURE), SIGNED.encode())
    assert verified_body(text.encode(), {KEY_FINGERPRINT: public}) == body
    for value in (TEST_SEED, TEST_PUBLIC, KEY_FINGERPRINT, SIGNED, SIGNATURE, text.strip(),
                  *TEST_PRIVATE_PEM.splitlines(), *TEST_PUBLIC_PEM.splitlines()):
        assert value in DOC, value
