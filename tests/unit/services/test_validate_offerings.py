"""``xceprov validate`` renders every listed offering: a site template that breaks on one is a
problem naming template, provider and what is wrong; a ``select:`` template waits for its catalogue."""

from __future__ import annotations

import json
from pathlib import Path

from tffake import SITE, FakeEngine

from orchestrator.configfile import parse_config
from orchestrator.services.validate import validate_all

OFFERINGS = """
  wide:
    providers:
      sim:
        image: debian-12
        offerings:
          - {{flavor: c8.large}}
          - {{flavor: c16.large, zone: zone-b}}
  picked:
    providers:
      sim: {{image: debian-12, select: {{cpus: {{min: 4}}}}}}
"""


def test_every_listed_offering_is_rendered(tmp_path: Path, toolkit: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "instance.json.j2").write_text(
        '{"name": {{ name|tojson }}, "template": {{ template|tojson }}, "flavor": {{ cloud.flavor|tojson }},'
        ' "image": "i", "tags": {{ tags|tojson }}, "zone": "zone-a"}'
    )
    text = (SITE + OFFERINGS).format(cluster="unit", state=tmp_path / "state")
    text += f"template_dirs: [{json.dumps(str(site))}]\n"
    report = validate_all(parse_config(text, "site.yaml", tmp_path), toolkit, engine=FakeEngine())
    assert report.problems == [
        "template wide on sim: instance.json.j2: rendered zone 'zone-a', but offering c16.large@zone-b "
        "is in zone 'zone-b' (render cloud.zone)"
    ]
    assert "template picked on provider sim (select: rendered once resolved)" in report.checked
