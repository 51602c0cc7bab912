"""The schema as SQLAlchemy metadata: what the code expects the migrations to have built.

A test compares this with a database migrated from ``schema/`` (they must be equal). The
functions and triggers live only in the SQL files.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP

metadata = MetaData()
TZ = TIMESTAMP(timezone=True)

gapless_config = Table(
    "gapless_config", metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    Column("cluster_id", Integer, nullable=False),
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    CheckConstraint("singleton", name="gapless_config_singleton"),
    CheckConstraint("cluster_id BETWEEN 0 AND 32767", name="gapless_config_cluster_range"),
)

series = Table(
    "series", metadata,
    Column("tenant", Text, nullable=False),
    Column("code", Text, nullable=False),
    Column("prefix", Text, nullable=False),
    Column("reset", Text, nullable=False, server_default=text("'yearly'")),
    Column("tz", Text, nullable=False, server_default=text("'Europe/Istanbul'")),
    Column("width", Integer, nullable=False, server_default=text("9")),
    Column("format", Text, nullable=False, server_default=text("'{prefix}{yyyy}{seq}'")),
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("tenant", "code", name="series_pkey"),
    UniqueConstraint("tenant", "prefix", name="series_tenant_prefix_key"),
)

number_counters = Table(
    "number_counters", metadata,
    Column("tenant", Text, nullable=False),
    Column("series", Text, nullable=False),
    Column("period_key", Text, nullable=False),
    Column("last_no", BigInteger, nullable=False),
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    Column("updated_at", TZ, nullable=False, server_default=text("now()")),
    PrimaryKeyConstraint("tenant", "series", "period_key", name="number_counters_pkey"),
    ForeignKeyConstraint(["tenant", "series"], ["series.tenant", "series.code"],
                         name="number_counters_series_fkey"),
)

invoices = Table(
    "invoices", metadata,
    Column("id", BigInteger, primary_key=True,
           server_default=text("gapless_next_id('invoices_local_seq'::regclass)")),
    Column("invoice_id", Text, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("series", Text, nullable=False),
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
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    Column("updated_at", TZ, nullable=False, server_default=text("now()")),
    Column("issued_at", TZ),
    UniqueConstraint("invoice_id", name="invoices_invoice_id_key"),
    ForeignKeyConstraint(["tenant", "series"], ["series.tenant", "series.code"],
                         name="invoices_series_fkey"),
    Index("invoices_counter_no_key", "tenant", "series", "period_key", "reserved_no",
          unique=True, postgresql_where=text("reserved_no IS NOT NULL")),
    Index("invoices_tenant_number_key", "tenant", "number", unique=True,
          postgresql_where=text("number IS NOT NULL")),
    Index("invoices_sending_idx", "sending_since", postgresql_where=text("status = 'SENDING'")),
    Index("invoices_error_due_idx", "next_attempt_at", postgresql_where=text("status = 'ERROR'")),
    Index("invoices_tenant_series_status_idx", "tenant", "series", "status"),
)

invoice_events = Table(
    "invoice_events", metadata,
    Column("id", BigInteger, primary_key=True,
           server_default=text("gapless_next_id('invoice_events_local_seq'::regclass)")),
    Column("sequence_id", BigInteger),
    Column("invoice_pk", BigInteger, nullable=False),
    Column("invoice_id", Text, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("series", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("from_status", Text),
    Column("to_status", Text, nullable=False),
    Column("number", Text),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("detail", Text),
    Column("actor", Text, nullable=False, server_default=text("'sql'")),
    Column("created_at", TZ, nullable=False, server_default=text("now()")),
    UniqueConstraint("sequence_id", name="invoice_events_sequence_id_key"),
    Index("invoice_events_invoice_pk_idx", "invoice_pk"),
    Index("invoice_events_tenant_sequence_idx", "tenant", "sequence_id"),
)

invoice_events_commit_lock = Table("invoice_events_commit_lock", metadata)

#: SQL functions the code (and producers in other frameworks) call.
EXPECTED_FUNCTIONS = frozenset({
    "gapless_next_id", "gapless_period_key", "gapless_render", "format_number", "next_number",
    "preview_number", "reserve_number", "gapless_event_sequence", "gapless_event_immutable",
    "gapless_invoice_guard", "gapless_invoice_history", "claim_invoice",
})
