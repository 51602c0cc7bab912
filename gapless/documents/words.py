"""The payable amount in Turkish words, as Turkish invoices carry it in a note ("YALNIZ: …").

The numbers are spelled by num2words (its Turkish writes each number as one word, the way
invoices print it: 1234 → "BİNİKİYÜZOTUZDÖRT"); this module adds the currency's names and the
upper-casing of Turkish (dotted and dotless i).
"""

from __future__ import annotations

import functools
from decimal import Decimal

from num2words import num2words

from gapless.documents.amounts import money

#: Main unit and hundredth of the currencies a Turkish invoice names in words; another currency
#: is named by its ISO code, its hundredths as "/100".
CURRENCY_WORDS = {
    "TRY": ("TÜRK LİRASI", "KURUŞ"),
    "USD": ("ABD DOLARI", "SENT"),
    "EUR": ("AVRO", "SENT"),
    "GBP": ("İNGİLİZ STERLİNİ", "PENİ"),
    "CHF": ("İSVİÇRE FRANGI", "SANTİM"),
}
_UPPER = str.maketrans({"i": "İ", "ı": "I"})


def upper_tr(text: str) -> str:
    """Upper case as Turkish writes it: i → İ, ı → I (``str.upper`` would make i → I)."""
    return text.translate(_UPPER).upper()


def spelled(number: int) -> str:
    """A whole number in Turkish words, upper case, one word (``101`` → ``YÜZBİR``)."""
    return upper_tr(num2words(number, lang="tr"))


def amount_in_words(amount: Decimal, currency: str) -> str:
    """``YALNIZ: <whole> <unit> [<hundredths> <subunit>]`` for a money amount ≥ 0."""
    cents = int(money(amount) * 100)
    whole, hundredths = divmod(cents, 100)
    unit, subunit = CURRENCY_WORDS.get(currency, (currency, ""))
    text = f"YALNIZ: {spelled(whole)} {unit}"
    if hundredths:
        text += f" {_hundredths(hundredths)} {subunit}" if subunit else f" {hundredths:02d}/100"
    return text


@functools.cache  # bounded: 1..99
def _hundredths(number: int) -> str:
    """:func:`spelled` of a number of hundredths, spelled once per process."""
    return spelled(number)
