"""The simulated cloud's flavor catalogue: the seeded default, a store from before it, the
``xcesim_flavors`` data source, and ``xceprov sim cloud flavors`` / ``flavor set|remove``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tf.iface import ReadDataContext
from tf.utils import Diagnostics

import orchestrator
from orchestrator.sim.cloud import catalogue
from orchestrator.sim.cloud.db import Database
from orchestrator.sim.cloud.provider import FlavorsDataSource, XceSimProvider, _flavor_object_type
from orchestrator.sim.cloud.store import CloudStore
from tests.sim_cloud_cli import run_cli as _run


def _names(path: Path) -> list[str]:
    return [f.name for f in catalogue.flavors(Database(path))]


def test_a_new_store_holds_the_default_catalogue_with_the_shipped_flavors(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    CloudStore(path)
    found = {f.name: f for f in catalogue.flavors(Database(path))}
    # The flavors the shipped configuration (and so the quickstart) names are in it.
    defaults = yaml.safe_load((Path(orchestrator.__file__).parent / "defaults" / "xceprov.yaml").read_text())
    shipped = {side["flavor"] for t in defaults["templates"].values() for side in t["providers"].values()}
    assert shipped <= set(found)
    assert [f.name for f in found.values() if f.gpus] == ["g4.xlarge"]
    assert {z for f in found.values() for z in f.zones} == {"a", "b", "c"}
    assert all(catalogue.problem(f) is None for f in found.values())


def test_an_older_store_gets_the_table_and_a_removal_stays_removed(tmp_path: Path) -> None:
    path = tmp_path / "cloud.sqlite"
    store = CloudStore(path)
    kept = store.create_out_of_band("old", "c8.large", "debian-12", {"xce:cluster": "demo"})
    # A store written before the catalogue: no table, no seed mark.
    conn = store._db.conn()
    conn.execute("DROP TABLE flavors")
    conn.execute("DELETE FROM meta WHERE key = 'flavors_seeded'")
    store.close()
    reopened = CloudStore(path)
    assert "c8.large" in _names(path)
    assert reopened.get(kept.id) is not None  # nothing else moved
    catalogue.remove_flavor(Database(path), "c8.large")
    CloudStore(path)
    assert "c8.large" not in _names(path)


def test_data_source_lists_the_catalogue_in_its_object_type(tmp_path: Path) -> None:
    provider = XceSimProvider()
    diags = Diagnostics()
    provider.configure_provider(diags, {"store": str(tmp_path / "cloud.sqlite"), "max_retries": None})
    catalogue.set_flavor(Database(provider.store.path), catalogue.Flavor("x1", 3, 1.5, 0, None, ()))
    got = FlavorsDataSource(provider).read(ReadDataContext(diags, "d"), {})
    assert got is not None and not diags.has_errors()
    by_name = {f["name"]: f for f in got["flavors"]}
    assert by_name["x1"] == {"name": "x1", "cpus": 3, "memory_gb": 1.5, "gpus": 0, "cost_per_hour": None, "zones": []}
    assert by_name["g4.xlarge"]["gpus"] == 4
    assert set(by_name["x1"]) == set(json.loads(_flavor_object_type().tf_type())[1])
    assert _flavor_object_type().encode(by_name["x1"])["cost_per_hour"] is None


def test_cli_shows_sets_and_removes_flavors(config: Path) -> None:
    code, out, _ = _run(config, "sim", "cloud", "flavors")
    assert code == 0
    assert out.splitlines()[0].split() == ["NAME", "CPUS", "MEMORY_GB", "GPUS", "COST_PER_HOUR", "ZONES"]
    code, out, _ = _run(
        config, "sim", "cloud", "flavor", "set", "h96", "--cpus", "96", "--memory-gb", "384", "--gpus", "0",
        "--cost", "2.5", "--zone", "b", "--zone", "c",
    )  # fmt: skip
    assert code == 0 and out.split()[-6:] == ["h96", "96", "384", "0", "2.5", "b,c"]
    code, out, _ = _run(config, "sim", "cloud", "flavors", "--json")
    doc = json.loads(out)
    assert doc["store"].endswith("cloud.sqlite")
    [h96] = [f for f in doc["flavors"] if f["name"] == "h96"]
    assert h96 == {"name": "h96", "cpus": 96, "memory_gb": 384.0, "gpus": 0, "cost_per_hour": 2.5, "zones": ["b", "c"]}
    # Set again: replaced (no price now).
    _run(config, "sim", "cloud", "flavor", "set", "h96", "--cpus", "96", "--memory-gb", "384")
    [h96] = [
        f for f in json.loads(_run(config, "sim", "cloud", "flavors", "--json")[1])["flavors"] if f["name"] == "h96"
    ]
    assert (h96["cost_per_hour"], h96["zones"]) == (None, [])
    code, out, _ = _run(config, "sim", "cloud", "flavor", "remove", "h96")
    assert code == 0 and out.strip() == "flavor h96 removed"
    assert "h96" not in _run(config, "sim", "cloud", "flavors")[1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("set", "x", "--cpus", "two", "--memory-gb", "4"), "bad --cpus 'two': expected a whole number"),
        (("set", "x", "--cpus", "0", "--memory-gb", "4"), "flavor 'x': cpus 0 must be 1 to 1024"),
        (("set", "x", "--cpus", "-2", "--memory-gb", "4"), "flavor 'x': cpus -2 must be 1 to 1024"),
        (("set", "x", "--cpus", "2", "--memory-gb", "nan"), "bad --memory-gb 'nan': expected a finite number"),
        (("set", "x", "--cpus", "2", "--memory-gb", "0"), "flavor 'x': memory 0 GB must be above 0"),
        (("set", "x", "--cpus", "2", "--memory-gb", "4", "--gpus", "99"), "flavor 'x': gpus 99 must be 0 to 64"),
        (("set", "x", "--cpus", "2", "--memory-gb", "4", "--cost", "-1"), "flavor 'x': cost -1 per hour"),
        (("set", "a@b", "--cpus", "2", "--memory-gb", "4"), "flavor 'a@b': flavor name 'a@b' must match"),
        (("set", "x", "--cpus", "2", "--memory-gb", "4", "--zone", "a b"), "zone name 'a b' must match"),
        (("set", "x", "--cpus", "2", "--memory-gb", "4", "--zone", "a", "--zone", "a"), "a zone is listed twice"),
        (("remove", "nope"), "no flavor 'nope' in the simulated cloud's catalogue"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(config: Path, args: tuple[str, ...], says: str) -> None:
    before = _run(config, "sim", "cloud", "flavors", "--json")[1]
    code, _, err = _run(config, "sim", "cloud", "flavor", *args)
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith("xceprov: ") and says in line
    assert _run(config, "sim", "cloud", "flavors", "--json")[1] == before
