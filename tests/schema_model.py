"""The schema as SQLAlchemy metadata: what the code expects the migrations to have built.

A test compares this with a database migrated from ``schema/`` (they must be equal). The
functions and triggers live only in the SQL files.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP, UUID

metadata = MetaData()
TZ = TIMESTAMP(timezone=True)


def _required(kind: Any, *names: str) -> list[Column[Any]]:
    """NOT NULL columns of one type, in order."""
    return [Column(name, kind, nullable=False) for name in names]


def _stamped(*names: str) -> list[Column[Any]]:
    """NOT NULL timestamps that default to the transaction's time."""
    return [Column(name, TZ, nullable=False, server_default=text("now()")) for name in names]

gapless_config = Table(
    "gapless_config", metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    Column("cluster_id", Integer, nullable=False),
    *_stamped("created_at"),
    CheckConstraint("singleton", name="gapless_config_singleton"),
    CheckConstraint("cluster_id BETWEEN 0 AND 32767", name="gapless_config_cluster_range"),
)

series = Table(
    "series", metadata,
    *_required(Text, "tenant", "code", "prefix"),
    Column("reset", Text, nullable=False, server_default=text("'yearly'")),
    Column("tz", Text, nullable=False, server_default=text("'Europe/Istanbul'")),
    Column("width", Integer, nullable=False, server_default=text("9")),
    Column("format", Text, nullable=False, server_default=text("'{prefix}{yyyy}{seq}'")),
    *_stamped("created_at"),
    Column("channel", Text, nullable=False, server_default=text("'any'")),
    Column("is_default", Boolean, nullable=False, server_default=text("false")),
    PrimaryKeyConstraint("tenant", "code", name="series_pkey"),
    UniqueConstraint("tenant", "prefix", name="series_tenant_prefix_key"),
    CheckConstraint("channel IN ('any', 'efatura', 'earsiv')", name="series_channel_kind"),
    Index("series_default_per_channel", "tenant", "channel", unique=True,
          postgresql_where=text("is_default")),
)

recipients = Table(
    "recipients", metadata,
    Column("tax_id", Text, primary_key=True),
    Column("registered", Boolean, nullable=False),
    Column("aliases", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    *_stamped("checked_at"),
)

number_counters = Table(
    "number_counters", metadata,
    *_required(Text, "tenant", "series", "period_key"),
    Column("last_no", BigInteger, nullable=False),
    *_stamped("created_at", "updated_at"),
    Column("last_at", TZ),
    # The head of the counter's chain (0009): its last record's seq and hash (none yet: 0, NULL).
    Column("chain_seq", BigInteger, nullable=False, server_default=text("0")),
    Column("chain_hash", Text),
    PrimaryKeyConstraint("tenant", "series", "period_key", name="number_counters_pkey"),
    ForeignKeyConstraint(["tenant", "series"], ["series.tenant", "series.code"],
                         name="number_counters_series_fkey"),
)

invoices = Table(
    "invoices", metadata,
    Column("id", BigInteger, primary_key=True,
           server_default=text("nextval('invoices_local_seq'::regclass)")),
    *_required(Text, "invoice_id", "tenant", "series"),
    Column("status", Text, nullable=False, server_default=text("'RECEIVED'")),
    Column("priority", SmallInteger, nullable=False, server_default=text("1")),
    Column("period_key", Text),
    Column("reserved_no", BigInteger),
    Column("number", Text),
    Column("reserved_at", TZ),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("sending_since", TZ),
    Column("next_attempt_at", TZ),
    Column("last_error", Text),
    Column("integrator_ref", Text),
    *_stamped("created_at", "updated_at"),
    Column("issued_at", TZ),
    Column("uuid", UUID(as_uuid=True), nullable=False, server_default=text("gen_random_uuid()")),
    Column("profile_version", Integer),
    Column("document_sha256", Text),
    # GİB's verdict after acceptance (0008): NULL not followed, pending, accepted, refused.
    Column("gib_status", Text),
    Column("gib_detail", Text),
    Column("gib_checked_at", TZ),
    Column("gib_next_check_at", TZ),
    # The SHA-256 of the stored message's canonical JSON (0009, docs/chain.md).
    Column("message_sha256", Text),
    CheckConstraint("gib_status IN ('pending', 'accepted', 'refused')",
                    name="invoices_gib_status_kind"),
    CheckConstraint("gib_status IS NULL OR status = 'ISSUED'", name="invoices_gib_status_issued"),
    UniqueConstraint("invoice_id", name="invoices_invoice_id_key"),
    UniqueConstraint("uuid", name="invoices_uuid_key"),
    ForeignKeyConstraint(["tenant", "series"], ["series.tenant", "series.code"],
                         name="invoices_series_fkey"),
    Index("invoices_counter_no_key", "tenant", "series", "period_key", "reserved_no",
          unique=True, postgresql_where=text("reserved_no IS NOT NULL")),
    Index("invoices_tenant_number_key", "tenant", "number", unique=True,
          postgresql_where=text("number IS NOT NULL")),
    Index("invoices_sending_idx", "sending_since", postgresql_where=text("status = 'SENDING'")),
    Index("invoices_error_due_idx", "next_attempt_at", postgresql_where=text("status = 'ERROR'")),
    Index("invoices_tenant_series_status_idx", "tenant", "series", "status"),
    Index("invoices_wrong_channel_idx", "id",
          postgresql_where=text("status = 'REJECTED' AND last_error LIKE 'WRONG CHANNEL: %'")),
    Index("invoices_gib_unasked_idx", "issued_at",
          postgresql_where=text("status = 'ISSUED' AND gib_status IS NULL "
                                "AND gib_next_check_at IS NULL")),
    Index("invoices_gib_due_idx", "gib_next_check_at",
          postgresql_where=text("status = 'ISSUED' AND gib_next_check_at IS NOT NULL")),
)

invoice_events = Table(
    "invoice_events", metadata,
    Column("id", BigInteger, primary_key=True,
           server_default=text("nextval('invoice_events_local_seq'::regclass)")),
    Column("sequence_id", BigInteger),
    Column("invoice_pk", BigInteger, nullable=False),
    *_required(Text, "invoice_id", "tenant", "series", "kind"),
    Column("from_status", Text),
    Column("to_status", Text, nullable=False),
    Column("number", Text),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("detail", Text),
    Column("actor", Text, nullable=False, server_default=text("'sql'")),
    *_stamped("created_at"),
    Column("document_sha256", Text),
    Index("invoice_events_sequence_id_key", "sequence_id", unique=True,
          postgresql_where=text("sequence_id IS NOT NULL")),
    Index("invoice_events_invoice_pk_idx", "invoice_pk"),
    Index("invoice_events_tenant_sequence_idx", "tenant", "sequence_id",
          postgresql_where=text("sequence_id IS NOT NULL")),
    Index("invoice_events_unpositioned_idx", "id", postgresql_where=text("sequence_id IS NULL")),
)

#: The feed's one row (the floor of positions); locked by gapless_feed_assign() while it gives
#: committed events their positions.
invoice_events_feed = Table(
    "invoice_events_feed", metadata,
    Column("one_row", Boolean, primary_key=True, server_default=text("true")),
    Column("floor", BigInteger, nullable=False, server_default=text("0")),
    CheckConstraint("one_row", name="invoice_events_feed_one_row"),
    CheckConstraint("floor >= 0", name="invoice_events_feed_floor_nonnegative"),
)

tenant_profiles = Table(
    "tenant_profiles", metadata,
    Column("tenant", Text, nullable=False),
    Column("version", Integer, nullable=False),
    *_required(Text, "tax_id", "name", "tax_office", "street", "district", "city"),
    Column("country", Text, nullable=False, server_default=text("'Türkiye'")),
    Column("postal_zone", Text),
    Column("email", Text),
    *_stamped("created_at"),
    PrimaryKeyConstraint("tenant", "version", name="tenant_profiles_pkey"),
    CheckConstraint("version > 0", name="tenant_profiles_version_positive"),
    CheckConstraint("tax_id ~ '^[0-9]{10,11}$'", name="tenant_profiles_tax_id_digits"),
)

invoice_documents = Table(
    "invoice_documents", metadata,
    Column("invoice_pk", BigInteger, nullable=False),
    *_required(Text, "sha256", "media_type", "format"),
    Column("body", LargeBinary, nullable=False),
    *_stamped("created_at"),
    PrimaryKeyConstraint("invoice_pk", "sha256", name="invoice_documents_pkey"),
    ForeignKeyConstraint(["invoice_pk"], ["invoices.id"], name="invoice_documents_invoice_fkey"),
    CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name="invoice_documents_sha256_hex"),
)

#: The tamper-evident chain of every counter (docs/chain.md); append-only.
chain_records = Table(
    "chain_records", metadata,
    *_required(Text, "tenant", "series", "period_key"),
    Column("seq", BigInteger, nullable=False),
    *_required(Text, "version", "kind"),
    Column("reserved_no", BigInteger, nullable=False),
    Column("number", Text, nullable=False),
    Column("invoice_id", Text),
    Column("uuid", UUID(as_uuid=True)),
    *[Column(name, Text) for name in ("message_sha256", "document_sha256", "ref", "reason")],
    Column("at", TZ, nullable=False),
    Column("migrated", Boolean, nullable=False, server_default=text("false")),
    Column("hash", Text, nullable=False),
    PrimaryKeyConstraint("tenant", "series", "period_key", "seq", name="chain_records_pkey"),
    CheckConstraint("kind IN ('seal', 'issued', 'rejected', 'voided', 'corrected')",
                    name="chain_records_kind"),
)

#: SQL functions the code (and producers in other frameworks) call.
EXPECTED_FUNCTIONS = frozenset({
    "gapless_next_id", "gapless_period_key", "gapless_render", "format_number", "next_number",
    "preview_number", "reserve_number", "gapless_feed_assign",
    "gapless_invoice_guard", "gapless_invoice_history", "claim_invoice",
    "gapless_seal", "gapless_profile_version", "gapless_take", "gapless_claim_row",
    "intake_invoice", "gapless_append_only", "gapless_durable_commit", "gapless_rebase_ids",
    "gapless_config_rebase_ids", "gapless_invoice_verdict",
    "gapless_canonical_json", "gapless_message_sha256", "gapless_chain_genesis",
    "gapless_chain_link", "gapless_chain_append", "gapless_invoice_chain",
})
