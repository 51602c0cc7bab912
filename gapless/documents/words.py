"""The payable amount in Turkish words, as Turkish invoices carry it in a note ("YALNIZ: …").

A number is written as one word, the way invoices print it (1234 → "BİNİKİYÜZOTUZDÖRT"): its
groups of three digits from the highest, each spelled and followed by its scale ("BİN",
"MİLYON", "MİLYAR", "TRİLYON"), a group of 0 left out and a lone thousand said "BİN", never
"BİRBİN" (101 000 is "YÜZBİRBİN", 1 000 is "BİN"). The groups (0 to 999) and the scale words
are num2words' Turkish, spelled once per process; the groups are put together here, because
num2words' own composition loses words in some numbers (101 001 comes out as "yüzbinbir",
100 001; 1 005 000 001 as "birmilyarmilyonbir"). This module also adds the currency's names and
the upper-casing of Turkish (dotted and dotless i).
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
    """A whole number ≥ 0 in Turkish words, upper case, one word (``101`` → ``YÜZBİR``)."""
    if number < 1000:
        return _group(number)
    words: list[str] = []
    scale = 0
    while number:
        number, group = divmod(number, 1000)
        if group:
            if scale == 0:
                words.append(_group(group))
            elif scale == 1 and group == 1:
                words.append(_scale(1))  # "BİN", never "BİRBİN"
            else:
                words.append(_group(group) + _scale(scale))
        scale += 1
    return "".join(reversed(words))


def amount_in_words(amount: Decimal, currency: str) -> str:
    """``YALNIZ: <whole> <unit> [<hundredths> <subunit>]`` for a money amount ≥ 0."""
    cents = int(money(amount) * 100)
    whole, hundredths = divmod(cents, 100)
    unit, subunit = CURRENCY_WORDS.get(currency, (currency, ""))
    text = f"YALNIZ: {spelled(whole)} {unit}"
    if hundredths:
        text += f" {_group(hundredths)} {subunit}" if subunit else f" {hundredths:02d}/100"
    return text


def _spelled_by_library(number: int) -> str:
    return upper_tr(num2words(number, lang="tr"))


@functools.cache  # bounded: 0..999
def _group(number: int) -> str:
    """A group of three digits (0 to 999) spelled, once per process."""
    return _spelled_by_library(number)


@functools.cache  # bounded: the scales num2words knows
def _scale(scale: int) -> str:
    """The word of 1000 ** ``scale`` (``BİN``, ``MİLYON``, …): num2words spells one of them as
    ``BİRMİLYON``, a thousand as ``BİN``."""
    word = _spelled_by_library(1000 ** scale)
    return word.removeprefix(_group(1)) if scale > 1 else word
