"""``kb alerts``: what the local stack sent the ops team (the mail sink's messages)."""

from __future__ import annotations

import json

from kb.settings import StackSettings
from kb_dev.observe import mail_folder, sent_alerts


def show_alerts(s: StackSettings, *, as_json: bool = False, last: int = 20) -> int:
    alerts = sent_alerts(s, limit=last or None)
    if as_json:
        print(json.dumps([a.as_dict() for a in alerts], indent=2, ensure_ascii=False))
        return 0
    if not alerts:
        print(f"no alerts sent (the mail sink keeps them in {mail_folder(s)}; `kb up` starts it)")
        return 0
    for a in alerts:
        print(f"{a.received}  {a.subject}")
        for line in a.text.splitlines()[:8]:
            print(f"    {line[:160]}")
        print()
    return 0
