"""The README's configuration table names every setting, with its real default."""

from __future__ import annotations

import re
from pathlib import Path

from gapless.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_every_setting_is_documented_with_its_default() -> None:
    rows = dict(re.findall(r"^\| `(GAPLESS_[A-Z0-9_]+)` \| ([^|]+) \|", README, re.MULTILINE))
    for name, field in Settings.model_fields.items():
        env = f"GAPLESS_{name.upper()}"
        assert env in rows, f"{env} is missing from the README configuration table"
        default = field.default
        shown = rows[env].strip().strip("`")
        if isinstance(default, bool):
            assert shown == str(default).lower()
        elif isinstance(default, float) and default.is_integer():
            assert shown in {str(default), str(int(default))}, (env, shown)
        elif default == "":
            assert shown == "(empty)"
        else:
            assert shown == str(default), (env, shown)
