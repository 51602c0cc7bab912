"""Invoices that bill dispatch notes (the contract: ``despatch_references``, rendered as
``cac:DespatchDocumentReference``) and e-Arşiv invoices that travel with the goods instead of a
dispatch note (``earsiv.is_despatch``, GİB's ``IS_DESPATCH`` reference): the message's rules,
the checks before the seal (a reference dated after the day of the check in the series' time
zone; ``is_despatch`` on an invoice that is not e-Arşiv), and documents GİB's XSD and
schematron (efatura-kontrol) accept, with the references where UBL 2.1's Invoice puts them."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from typing import Any

import pytest
from lxml import etree

from gapless.documents import build_issuer, check_ubl_inputs, render_ubl_tr, summarize
from gapless.documents.checks import references_date_problem
from gapless.issuing.admission import numbering_problem
from gapless.ledger.tenants import Profile
from gapless.message import MAX_BODY_BYTES, InvalidMessage, validate_message
from gapless.numbers import build_series_spec
from tests.ubl import NS, assert_valid, field

ISSUER = build_issuer(tax_id="1234567803", name="Acme Bilişim A.Ş.", tax_office="Kadıköy",
                      street="Rıhtım Cad. No:1", district="Kadıköy", city="İstanbul",
                      postal_zone="34716")
SEALED = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
TODAY = "2026-11-26"
REFS = [{"number": "IRS2026000000004", "issue_date": "2026-11-24"},
        {"number": "IRS2026000000007", "issue_date": TODAY}]


def invoice(**changes: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "invoice_id": "bill-1", "tenant": "acme", "series": "ABC", "issue_date": TODAY,
        "currency": "TRY",
        "customer": {"tax_id": "9876543210", "name": "Örnek Ticaret A.Ş.",
                     "tax_office": "Çankaya", "address": {"district": "Çankaya",
                                                          "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": "12", "unit_price": "10.00",
                   "vat_rate": "20"}]}
    message.update(changes)
    return message


def render(message: dict[str, Any]) -> bytes:
    parsed = validate_message(message)
    check_ubl_inputs(parsed, ISSUER)
    return render_ubl_tr(parsed, number="ABC2026000000001", uuid=uuid.uuid4(),
                         sealed_at=SEALED, tz="Europe/Istanbul", issuer=ISSUER)


def top_level(body: bytes) -> list[str]:
    """The root's children, by local name, in document order."""
    return [etree.QName(child).localname for child in etree.fromstring(body)]


def references(body: bytes) -> list[tuple[str | None, str | None]]:
    return [(ref.findtext("cbc:ID", namespaces=NS), ref.findtext("cbc:IssueDate", namespaces=NS))
            for ref in etree.fromstring(body).findall("cac:DespatchDocumentReference", NS)]


def additional(body: bytes) -> dict[str | None, str | None]:
    return {ref.findtext("cbc:DocumentTypeCode", namespaces=NS):
            ref.findtext("cbc:ID", namespaces=NS)
            for ref in etree.fromstring(body).findall("cac:AdditionalDocumentReference", NS)}


# ------------------------------------------------------------------------------- the message


def test_the_references_and_the_flag_are_read_and_kept_as_sent() -> None:
    message = validate_message(invoice(despatch_references=REFS, profile="EARSIVFATURA",
                                       earsiv={"is_despatch": True}))
    assert [(r.number, r.issue_date) for r in message.despatch_references or ()] == [
        ("IRS2026000000004", date(2026, 11, 24)), ("IRS2026000000007", date(2026, 11, 26))]
    assert message.earsiv is not None
    assert message.earsiv.is_despatch is True
    assert message.payload()["despatch_references"] == REFS
    assert message.payload()["earsiv"] == {"is_despatch": True}


def test_the_flag_is_false_when_absent_and_stays_out_of_the_payload() -> None:
    message = validate_message(invoice(profile="EARSIVFATURA", earsiv={"send_type": "KAGIT"}))
    assert message.earsiv is not None
    assert message.earsiv.is_despatch is False
    assert message.payload()["earsiv"] == {"send_type": "KAGIT"}
    assert validate_message(invoice()).despatch_references is None


MALFORMED = [
    pytest.param({"despatch_references": []}, "despatch_references: ", id="empty-list"),
    pytest.param({"despatch_references": REFS[0]}, "despatch_references: ", id="not-a-list"),
    pytest.param({"despatch_references": [{"number": "IRS-4", "issue_date": TODAY}]},
                 "despatch_references.0.number: must be a GİB number", id="not-a-gib-number"),
    pytest.param({"despatch_references": [{"number": "irs2026000000004", "issue_date": TODAY}]},
                 "despatch_references.0.number: must be a GİB number", id="lower-case"),
    pytest.param({"despatch_references": [{"number": "IRS1999000000004", "issue_date": TODAY}]},
                 "despatch_references.0.number: must be a GİB number", id="not-this-century"),
    pytest.param({"despatch_references": [{"number": "IRS20260000000041",
                                           "issue_date": TODAY}]},
                 "despatch_references.0.number: must be a GİB number", id="17-characters"),
    pytest.param({"despatch_references": [{"number": 2026000000004, "issue_date": TODAY}]},
                 "despatch_references.0.number: must be a string", id="a-number"),
    pytest.param({"despatch_references": [REFS[0], {"number": "IRS2026000000005",
                                                     "issue_date": "2026-02-30"}]},
                 "despatch_references.1.issue_date: is not a real calendar date",
                 id="no-such-day"),
    pytest.param({"despatch_references": [{"number": "IRS2026000000004"}]},
                 "despatch_references.0.issue_date: ", id="no-date"),
    pytest.param({"despatch_references": [{**REFS[0], "type": "SEVK"}]},
                 "despatch_references.0.type: ", id="unknown-field"),
    pytest.param({"despatch_references": [REFS[0], REFS[1], REFS[0]]},
                 "despatch_references.2.number: names the same dispatch note twice",
                 id="twice"),
    pytest.param({"despatch_references": [
        {"number": f"IRS2026{n:09d}", "issue_date": TODAY} for n in range(1, 102)]},
                 "despatch_references: ", id="more-than-100"),
    pytest.param({"profile": "EARSIVFATURA", "earsiv": {"is_despatch": "true"}},
                 "earsiv.is_despatch: must be true or false, not a string", id="flag-string"),
    pytest.param({"profile": "EARSIVFATURA", "earsiv": {"is_despatch": 1}},
                 "earsiv.is_despatch: must be true or false, not a number", id="flag-number"),
    pytest.param({"profile": "EARSIVFATURA", "earsiv": {"is_despatch": None}},
                 "earsiv.is_despatch: must be true or false, not null", id="flag-null"),
]


@pytest.mark.parametrize(("changes", "reason"), MALFORMED)
def test_a_malformed_reference_or_flag_is_refused_naming_the_field(
        changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        validate_message(invoice(**changes))
    assert refused.value.reason.startswith(reason), refused.value.reason
    assert "9876543210" not in refused.value.reason


def test_a_hundred_references_fit_in_a_message() -> None:
    refs = [{"number": f"IRS2026{n:09d}", "issue_date": TODAY} for n in range(1, 101)]
    message = validate_message(invoice(despatch_references=refs))
    assert len(message.body()) < MAX_BODY_BYTES
    assert references(render(invoice(despatch_references=refs))) == [
        (ref["number"], ref["issue_date"]) for ref in refs]


# ------------------------------------------------------------------------------- before the seal


@pytest.mark.parametrize("profile", ["TEMELFATURA", "TICARIFATURA"])
def test_is_despatch_on_an_invoice_that_is_not_e_arsiv_is_refused(profile: str) -> None:
    parsed = validate_message(invoice(profile=profile, earsiv={"is_despatch": True}))
    with pytest.raises(InvalidMessage) as refused:
        check_ubl_inputs(parsed, ISSUER)
    assert refused.value.reason == (f"earsiv.is_despatch: only for an invoice that goes e-Arşiv "
                                    f"(EARSIVFATURA), not a {profile} one")
    # without a profile the document is a TEMELFATURA (a series of channel any): refused too
    with pytest.raises(InvalidMessage, match=r"^earsiv\.is_despatch: "):
        check_ubl_inputs(validate_message(invoice(earsiv={"is_despatch": True})), ISSUER)
    # false is no claim, but e-Arşiv facts on an e-Fatura are refused as before
    with pytest.raises(InvalidMessage, match=r"^earsiv: only for an EARSIVFATURA"):
        check_ubl_inputs(validate_message(invoice(profile=profile,
                                                  earsiv={"is_despatch": False})), ISSUER)


def test_a_reference_dated_after_today_in_the_series_time_zone_is_refused() -> None:
    future = validate_message(invoice(despatch_references=[
        REFS[0], {"number": "IRS2026000000009", "issue_date": "2026-11-27"}]))
    assert references_date_problem(future, date(2026, 11, 26), "Europe/Istanbul") == (
        "despatch_references.1.issue_date: 2026-11-27 is after today (2026-11-26 in "
        "Europe/Istanbul); a dispatch note is issued before the invoice that bills it")
    assert references_date_problem(future, date(2026, 11, 27), "Europe/Istanbul") is None
    assert references_date_problem(validate_message(invoice()), date(2026, 11, 26), "UTC") is None


def test_numbering_refuses_a_future_reference_on_the_series_clock_with_or_without_a_profile(
        ) -> None:
    """22:30 UTC on the 26th is already the 27th in Istanbul: a note of the 27th may be billed
    in an Istanbul series, not in a UTC one. The date window (issue_date) is checked first."""
    message = validate_message(invoice(issue_date="2026-11-26", despatch_references=[
        {"number": "IRS2026000000009", "issue_date": "2026-11-27"}]))
    late = datetime(2026, 11, 26, 22, 30, tzinfo=UTC)
    istanbul = build_series_spec("acme", "ABC")
    utc = build_series_spec("acme", "UTC", tz="UTC")
    profile = Profile("acme", 1, ISSUER, late)
    for with_profile in (None, profile):
        assert numbering_problem(message, istanbul, with_profile, late, 7) is None
        problem = numbering_problem(message, utc, with_profile, late, 7)
        assert problem is not None
        assert problem.startswith("despatch_references.0.issue_date: 2026-11-27 is after today "
                                  "(2026-11-26 in UTC)")
    stale = message.model_copy(update={"issue_date": date(2026, 10, 1)})
    assert (numbering_problem(stale, utc, None, late, 7) or "").startswith("issue_date: ")


# ------------------------------------------------------------------------------- the document


def test_an_e_fatura_that_bills_dispatch_notes_names_them_in_order_after_its_returns() -> None:
    body = render(invoice(type="IADE", despatch_references=REFS, billing_reference=[
        {"number": "SUP2026000000012", "issue_date": "2026-11-20"}]))
    assert_valid(body)
    assert references(body) == [(ref["number"], ref["issue_date"]) for ref in REFS]
    names = top_level(body)
    # UBL 2.1 Invoice: … BillingReference, DespatchDocumentReference, …,
    # AdditionalDocumentReference, …, Signature, AccountingSupplierParty …
    last_billing = len(names) - 1 - names[::-1].index("BillingReference")
    despatches = [i for i, name in enumerate(names) if name == "DespatchDocumentReference"]
    assert despatches == list(range(last_billing + 1, last_billing + 1 + len(REFS)))
    assert despatches[-1] < names.index("Signature") < names.index("AccountingSupplierParty")
    assert "AdditionalDocumentReference" not in names  # an e-Fatura has no e-Arşiv facts
    assert "IS_DESPATCH" not in body.decode()
    reference = etree.fromstring(body).find("cac:DespatchDocumentReference", NS)
    assert [etree.QName(child).localname for child in reference] == ["ID", "IssueDate"]


def test_an_e_arsiv_invoice_that_travels_with_the_goods_carries_is_despatch() -> None:
    body = render(invoice(profile="EARSIVFATURA", despatch_references=REFS[:1],
                          earsiv={"send_type": "KAGIT", "is_despatch": True}))
    assert_valid(body)
    assert additional(body) == {"SEND_TYPE": "KAGIT", "IS_DESPATCH": "."}
    flag = next(ref for ref in etree.fromstring(body).findall("cac:AdditionalDocumentReference",
                                                             NS)
                if ref.findtext("cbc:DocumentTypeCode", namespaces=NS) == "IS_DESPATCH")
    assert flag.findtext("cbc:IssueDate", namespaces=NS) == field(body, "cbc:IssueDate")
    names = top_level(body)
    assert names.index("DespatchDocumentReference") < names.index("AdditionalDocumentReference")
    assert references(body) == [("IRS2026000000004", "2026-11-24")]


def test_is_despatch_sits_beside_an_internet_sale_and_false_renders_nothing() -> None:
    sale = {"website": "https://shop.example", "payment_method": "KAPIDAODEME",
            "payment_date": TODAY}
    body = render(invoice(profile="EARSIVFATURA",
                          earsiv={"is_despatch": True, "internet_sale": sale}))
    assert_valid(body)
    assert set(additional(body)) == {"SEND_TYPE", "IS_DESPATCH", "IS_INTERNET", "INT_WEBSITE",
                                     "INT_PAYMENT_METHOD", "INT_PAYMENTDATE"}
    plain = render(invoice(profile="EARSIVFATURA", earsiv={"is_despatch": False}))
    assert_valid(plain)
    assert set(additional(plain)) == {"SEND_TYPE"}


def test_without_references_there_is_no_despatch_document_reference() -> None:
    body = render(invoice())
    assert "DespatchDocumentReference" not in top_level(body)
    assert summarize(body)["bills"] is None


def test_the_summary_names_the_dispatch_notes_billed() -> None:
    assert summarize(render(invoice(despatch_references=REFS)))["bills"] == (
        "IRS2026000000004 of 2026-11-24, IRS2026000000007 of 2026-11-26")
