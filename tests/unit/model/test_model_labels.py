"""The toolkit's tags as a cloud's labels (orchestrator/model/labels.py): key map and value encoding."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.model import tags as owner
from orchestrator.model.labels import LabelError, LabelMap
from orchestrator.model.modules import MODULES, ProviderModule, label_refusal

# A cloud whose labels take lower-case letters, digits, "_" and "-", at most 63 of them.
GCP_KEYS = {key: key.replace(":", "_") for key in owner.TOOLKIT_TAGS}
GCP = LabelMap("gce", GCP_KEYS, "[a-z0-9_-]", "_", 63)


def _tags(epoch: str = "3.17") -> dict[str, str]:
    return {
        **owner.owner_tags("demo", "gce", "op-6553f100-0123456789ab", epoch, "cpu", 3600),
        owner.PROTECT: "true",
        "team": "physics",
    }


def test_owner_tags_become_mapped_labels_and_read_back_exactly() -> None:
    tags = _tags()
    labels = GCP.to_labels(tags)
    assert labels == {
        "xce_cluster": "demo",
        "xce_provider": "gce",
        "xce_op_id": "op-6553f100-0123456789ab",
        "xce_epoch": "_3_2e17",  # "." is refused: the escape, then its UTF-8 byte in hex
        "xce_template": "cpu",
        "xce_max_lifetime": "3600",
        "xce_protect": "true",
        "team": "physics",
    }
    assert GCP.from_labels(labels) == tags


@pytest.mark.parametrize(
    "value",
    ["", "none", "3.17", "_", "_x", "_5fx", "a_b", "Upper Case", "ünï €", "x" * 63, "-", "__", "_2e", "a\nb"],
)
def test_every_value_round_trips(value: str) -> None:
    label = GCP.encode(owner.EPOCH, value)
    assert GCP.fits(label)
    assert GCP.decode(label) == value


def test_written_forms_never_collide() -> None:
    assert (GCP.encode(owner.EPOCH, "3.17"), GCP.encode(owner.EPOCH, "_x")) == ("_3_2e17", "__5fx")
    values = ["_x", "_5fx", "x", "5fx", "_", "", "a.b", "a_2eb", "_a_2eb", "A", "_41", "a"]
    written = [GCP.encode(owner.EPOCH, v) for v in values]
    assert len(set(written)) == len(values), dict(zip(values, written, strict=True))


@pytest.mark.parametrize("text", ["_zz", "_5", "_61", "_abc", "_c3", "_5fzz"])
def test_a_label_that_is_no_written_form_reads_as_its_own_text(text: str) -> None:
    # Hand-edited: never read as some other value (it starts with "_", and no name does).
    assert GCP.decode(text) == text
    back = GCP.from_labels({"xce_cluster": text, "xce_protect": text})
    assert back[owner.CLUSTER] == text != "demo"
    assert back[owner.PROTECT] == text  # a protect label of any text still protects


def test_a_literal_owner_key_under_a_mapped_module_is_not_read_as_the_toolkits() -> None:
    back = GCP.from_labels({"xce:cluster": "demo", "xce:provider": "gce", "team": "x"})
    assert back == {"team": "x"}


def test_a_value_too_long_for_the_labels_is_refused_in_one_line() -> None:
    with pytest.raises(LabelError) as caught:
        GCP.to_labels({owner.TEMPLATE: "cpu", owner.EPOCH: "1." * 30})
    assert str(caught.value) == ("tag xce:epoch='" + "1." * 30 + "': the labels take at most 63 characters (121 here)")


def test_a_site_tag_the_labels_refuse_is_refused_not_encoded() -> None:
    with pytest.raises(LabelError) as caught:
        GCP.to_labels({"Team": "physics"})
    assert str(caught.value) == "tag Team='physics': the labels take only characters of [a-z0-9_-]"
    with pytest.raises(LabelError, match=r"^tag xce_cluster='other': xce_cluster is the label key of xce:cluster$"):
        GCP.to_labels({"xce_cluster": "other"})


def test_without_an_escape_values_are_written_as_they_are_or_refused() -> None:
    plain = LabelMap("plain", GCP_KEYS, "[a-z0-9_.-]")
    assert plain.to_labels({owner.CLUSTER: "demo", owner.EPOCH: "3.17"}) == {"xce_cluster": "demo", "xce_epoch": "3.17"}
    with pytest.raises(LabelError, match=r"^tag xce:template='CPU': the labels take only characters of"):
        plain.to_labels({owner.TEMPLATE: "CPU"})


def test_the_shipped_modules_write_tags_as_they_are() -> None:
    tags = {**_tags(), "Team Name": "Physics & Maths"}
    for entry in MODULES.values():
        assert entry.labels.identity
        assert entry.labels.to_labels(tags) == tags
        assert entry.labels.from_labels(tags) == tags


def test_a_map_that_is_not_collision_free_is_refused_where_the_entry_is_written() -> None:
    base = MODULES["xcesim"]
    with pytest.raises(ValueError, match=r"same label key \['xce:provider'\]"):
        dataclasses.replace(base, tag_keys={owner.CLUSTER: owner.PROVIDER})
    with pytest.raises(ValueError, match=r"maps only the toolkit's tags"):
        dataclasses.replace(base, tag_keys={"team": "t"})
    with pytest.raises(ValueError, match=r"tag_escape '\.' is not one character its labels take"):
        dataclasses.replace(base, tag_chars="[a-z0-9_-]", tag_escape=".")
    with pytest.raises(ValueError, match=r"digits 0-9 and a-f"):
        dataclasses.replace(base, tag_chars="[g-z_]", tag_escape="_")


def test_a_provider_whose_labels_cannot_carry_a_template_name_is_refused() -> None:
    entry = ProviderModule(
        name="gce",
        instance_types=("x_instance",),
        error_rules=(),
        tag_keys=GCP_KEYS,
        tag_chars="[a-z0-9_-]",
        tag_escape="_",
        tag_max_length=63,
    )
    common = {owner.CLUSTER: "demo", owner.PROVIDER: "gce"}
    assert label_refusal(entry, common, ["cpu", "gpu_large"]) is None
    narrow = dataclasses.replace(entry, tag_chars="[a-z0-9-]", tag_escape="-")
    assert label_refusal(narrow, common, ["gpu_large"]) == (
        "module gce: tag key 'xce_cluster' has characters outside [a-z0-9-]"
    )
    dashed = dataclasses.replace(
        narrow, tag_keys={k: k.replace(":", "-").replace("_", "-") for k in owner.TOOLKIT_TAGS}
    )
    assert label_refusal(dashed, common, ["gpu_large"]) == (
        "module gce: template name 'gpu_large' is not a label value as it is, "
        "which its xce-template label must be (the contract compares the two)"
    )
