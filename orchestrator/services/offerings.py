"""``xceprov offerings [TEMPLATE]``: every offering of each template on each of its providers.

Providers in the policy's order (highest ``priority`` first), and on each provider its
offerings in the order the policy asks them (lowest cost per slot, then the configured order):
the one ``flavor:``, the listed ``offerings:``, or what ``select:`` picks from the provider's
flavor catalogue (read through the catalogue root when older than ``catalogue_ttl``, or with
``refresh``; ``orchestrator/ops/catalogue.py``). ``--json`` prints::

    {"cluster": "demo",
     "templates": [
       {"template": "cpu",
        "providers": [
          {"provider": "sim", "module": "xcesim", "priority": 10,
           "way": "flavor" | "offerings" | "select",
           "catalogue": {"read_at": "<RFC 3339>", "flavors": 7} | null,
           "problem": null | "<why select: gives no offering>",
           "offerings": [
             {"order": 1, "offering": "c8.large@a", "flavor": "c8.large", "zone": "a",
              "subnet": null, "cost_per_hour": 0.34, "slots": 8, "cost_per_slot": 0.0425,
              "source": "flavor" | "listed" | "catalogue"}, ...]}, ...]}, ...]}

A template whose ``select:`` matches nothing has an empty list (the policy's ``no-offering``);
``problem`` says why when the catalogue could not be read or priced.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.model.catalogue import Selections, select_pairs
from orchestrator.model.config import Config
from orchestrator.model.offerings import Offering, by_cost
from orchestrator.ops.catalogue import Catalogue, catalogue_reader
from orchestrator.reconcile.policy import by_priority


def offerings_report(loaded: LoadedConfig, template: str | None = None, refresh: bool = False) -> dict[str, Any]:
    """The document of ``xceprov offerings --json`` (the module docstring)."""
    config = loaded.config
    if template is not None and template not in config.templates:
        known = ", ".join(sorted(config.templates)) or "none"
        raise UsageError(f"no template named {template!r} (known: {known})")
    names = [template] if template is not None else sorted(config.templates)
    reader = catalogue_reader(config)
    wanted = {p for t, p in select_pairs(config) if t in names}
    selections = reader.selections(refresh) if wanted else Selections({}, {})
    return {
        "cluster": config.cluster,
        "templates": [
            {"template": name, "providers": _providers(config, name, selections, reader.catalogues)} for name in names
        ],
    }


def _providers(
    config: Config, template: str, selections: Selections, catalogues: Mapping[str, Catalogue]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    spec = config.templates[template]
    for provider in by_priority(config, template):
        side = spec.providers[provider]
        way = "select" if side.select is not None else ("offerings" if side.offerings else "flavor")
        if way == "select":
            offerings = selections.selected.get((template, provider), [])
        else:
            offerings = side.listed_offerings(spec.xce.slots)
        catalogue = catalogues.get(provider) if way == "select" else None
        out.append(
            {
                "provider": provider,
                "module": config.providers[provider].module,
                "priority": config.providers[provider].priority,
                "way": way,
                "catalogue": None if catalogue is None else _catalogue(catalogue),
                "problem": selections.problems.get((template, provider)),
                "offerings": _ordered(offerings),
            }
        )
    return out


def _catalogue(catalogue: Catalogue) -> dict[str, Any]:
    read_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(catalogue.read_at))
    return {"read_at": read_at, "flavors": len(catalogue.flavors)}


def _ordered(offerings: Sequence[Offering]) -> list[dict[str, Any]]:
    return [{"order": n, **o.evidence(), "source": o.source} for n, o in enumerate(by_cost(offerings), start=1)]


def format_report(doc: Mapping[str, Any]) -> str:
    """The ``xceprov offerings`` table: per template and provider, one line per offering in order."""
    lines: list[str] = []
    for entry in doc["templates"]:
        lines.append(f"{entry['template']}:")
        for prov in entry["providers"]:
            head = f"  {prov['provider']} (module {prov['module']}, priority {prov['priority']}, {prov['way']}"
            if prov["catalogue"] is not None:
                head += f", catalogue of {prov['catalogue']['flavors']} flavors read {prov['catalogue']['read_at']}"
            lines.append(head + ")")
            if prov["problem"]:
                lines.append(f"    no offering: {prov['problem']}")
            elif not prov["offerings"]:
                lines.append("    no offering matches")
            for o in prov["offerings"]:
                lines.append(
                    f"    {o['order']:>2}. {o['offering']:<28} {o['cost_per_hour']:>9.4f}/h  "
                    f"{o['slots']:>3} slots  {o['cost_per_slot']:>9.4f}/slot  {o['source']}"
                )
    return "\n".join(lines)
