"""The desired set keeps its baked images across every write of its instances (shard 0 only)."""

from __future__ import annotations

from pathlib import Path

from tffake import ROOT, site_config

from orchestrator.model.images import ImageSpec
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.workdir import ProviderWorkdir

SPEC = ImageSpec(name="n", instance_id="i-1", tags={"xce:op_id": "op-1", "xce:kind": "image", "xce:template": "cpu"})


def test_a_variables_document_keeps_the_images_of_the_desired_set(tmp_path: Path) -> None:
    loaded = site_config(tmp_path)
    workdir = ProviderWorkdir(loaded.config, "sim", ROOT)
    workdir.parent_dir()
    # No images: the key is left out, so a desired set from before images existed plans as before.
    assert "images" not in workdir.variables({}, {})
    workdir.desired.write(workdir.variables({}, {}, {"op-1-image": SPEC}))
    assert workdir.variables({}, {})["images"] == {"op-1-image": SPEC.terraform_value()}
    assert "images" not in workdir.variables({}, {}, {})  # an image delete plans without it
    assert workdir.desired.images() == {"op-1-image": SPEC}
    # A shard >= 1 never holds images, whatever shard 0 keeps.
    shard1 = ProviderShards(loaded.config, "sim", ROOT, workdir.documents).shard(1)
    assert "images" not in shard1.variables({}, {})
