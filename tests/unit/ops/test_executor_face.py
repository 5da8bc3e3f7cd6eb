"""The executor's face is its operations and reads, nothing else (docs/architecture.md, "The executor's rooms").

Its collaborators (the shard set, Terraform steps, the loss path, the create, return, bake,
warm-pool start, resume and refused-close ops) are its own: no module of ``orchestrator``
outside ``orchestrator/ops/executor`` imports one or reaches one through an executor, none
reads the executor's parts back from it (the configuration, recorder, fence, facts... are
handed to whoever needs them by whoever built them), and none extends the executor (the daemon
hands it a guard and a watch instead).
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tffake import FakeEngine, site_config, unit_executor

from orchestrator.ops.executor import Executor

PACKAGE = Path(__file__).resolve().parents[3] / "orchestrator"
INSIDE = PACKAGE / "ops" / "executor"

# What a caller may ask of an executor: the operations, then the reads.
FACE = {
    "create",
    "start_pool",
    "place",
    "return_instances",
    "bake",
    "delete_image",
    "retire",
    "observe_losses",
    "terminate_unmanaged",
    "resume",
    "resume_op",
    "close_refused",
    "survey",
    "shards",
    "workdir",
    "desired",
    "held",
    "kept_images",
    "listable",
}
# The executor's collaborators (classes) and what used to be read through an executor.
COLLABORATORS = {"ShardSet", "TerraformSteps", "LossPath", "CreateOp", "ReturnOp", "UnmanagedTermination"}
COLLABORATORS |= {"ResumeOp", "RefusedClose", "BakeOp", "StartOp"}
REACHED = {"shardset", "terraform", "losspath", "creates", "returns", "unmanaged", "parts"}
REACHED |= {"resumes", "refused", "bakes", "starts"}
REACHED |= {"config", "recorder", "engine", "fence", "facts", "hosts", "clock", "sleep", "decommission"}


def test_an_executor_offers_exactly_its_operations_and_reads(tmp_path: Path) -> None:
    executor = unit_executor(site_config(tmp_path), FakeEngine())
    assert {name for name in dir(executor) if not name.startswith("_")} == FACE
    assert [n for n, v in inspect.getmembers(Executor) if isinstance(v, property)] == []


def _outside() -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if INSIDE not in path.parents:
            yield path, ast.parse(path.read_text(), str(path))


def _names_an_executor(node: ast.expr) -> bool:
    """``executor``, ``self.executor``, ``phases.executor``...: an expression naming an executor."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith("executor")


def _violations() -> Iterator[str]:
    for path, tree in _outside():
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orchestrator.ops.executor"):
                if node.module != "orchestrator.ops.executor":
                    yield f"{where}:{node.lineno}: imports {node.module} (a room of the executor, not its face)"
                taken = sorted({a.name for a in node.names} & COLLABORATORS)
                if taken:
                    yield f"{where}:{node.lineno}: imports the collaborators {', '.join(taken)}"
            elif isinstance(node, ast.Attribute) and node.attr in REACHED and _names_an_executor(node.value):
                yield f"{where}:{node.lineno}: reaches {ast.unparse(node)} through an executor"
            elif isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "Executor" for b in node.bases
            ):
                yield f"{where}:{node.lineno}: class {node.name} extends Executor"


def test_nothing_outside_the_executor_reaches_its_collaborators_or_parts() -> None:
    assert list(_violations()) == []
