"""Any document, by its message's model: the one place that picks the invoice's or the dispatch
note's check and rendering, so that callers hold a message of either kind without asking which
(``check_inputs`` before the seal, ``render`` after it)."""

from __future__ import annotations

import uuid as uuid_module
from datetime import datetime

from gapless.documents.checks import check_ubl_inputs
from gapless.documents.despatch import check_despatch_inputs, render_despatch
from gapless.documents.parties import Issuer
from gapless.documents.ubl_tr import render_ubl_tr
from gapless.message import AnyMessage, DespatchMessage


def check_inputs(message: AnyMessage, issuer: Issuer) -> None:
    """:func:`~gapless.documents.check_ubl_inputs` for an invoice,
    :func:`~gapless.documents.check_despatch_inputs` for a dispatch note."""
    if isinstance(message, DespatchMessage):
        check_despatch_inputs(message, issuer)
    else:
        check_ubl_inputs(message, issuer)


def render(message: AnyMessage, *, number: str, uuid: uuid_module.UUID, sealed_at: datetime,
           tz: str, issuer: Issuer) -> bytes:
    """The UBL-TR document of ``message``: an Invoice or a DespatchAdvice."""
    if isinstance(message, DespatchMessage):
        return render_despatch(message, number=number, uuid=uuid, sealed_at=sealed_at, tz=tz,
                               issuer=issuer)
    return render_ubl_tr(message, number=number, uuid=uuid, sealed_at=sealed_at, tz=tz,
                         issuer=issuer)
