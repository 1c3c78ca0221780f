"""Sorts the test files by subject (issue 46): one table, old path -> new path, and the code that applies it.

    python tools/sort_tests.py            # git mv every file of the table still at its old path, then rewrite
                                          # every reference to an old path in the repository's text files
    python tools/sort_tests.py --check    # exit 1 listing tests/test_*.py at the root that the table does not
                                          # sort, and any two test files of one basename (see below)
    python tools/sort_tests.py --dry-run  # say what would move or be rewritten, change nothing

Both steps are idempotent: after a merge that brought edits to files at their old paths (git's rename detection
puts them into the moved files) or new references to old paths (docs, comments, Makefile targets), running it
again finishes the job. A file the table does not know stays where it is and ``--check`` names it, as it names an old path
that a merge brought back beside its new one (a file folded into another: resolve by hand); sort it by
hand (``git mv`` plus one line in ``TABLE``) and deepen the paths it computes from its own ``__file__`` by one
level (``Path(__file__).parent`` -> ``.parents[1]``, ``parents[1]`` -> ``parents[2]``).

Basenames stay unique across tests/: the subdirectories are not packages (a ``tests/io/__init__.py`` would
shadow the standard library's ``io``), so pytest's default import mode imports each test file by its basename,
and two files of one name would collide. Helpers (``_kernel_paths``, ``_examples``...) stay in tests/, which
``tests/conftest.py`` puts on ``sys.path`` with every subject folder (a test file importing another's cases,
``from test_native_kernels import CASES``, finds it wherever either lives; the rewrite renames such imports).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Every test file that sat at tests/ before issue 46, and where it lives now (named for what it tests).
TABLE: dict[str, str] = {
    # the engine: the step, its plan, its safety, what every generation shares
    "tests/test_capture.py": "tests/engine/test_capture.py",
    "tests/test_gradient_aliasing.py": "tests/engine/test_gradient_aliasing.py",
    "tests/test_handed_on.py": "tests/engine/test_handed_on.py",
    "tests/test_hostile_input.py": "tests/engine/test_hostile_input.py",
    "tests/test_hostile_input_round2.py": "tests/engine/test_hostile_arguments.py",
    "tests/test_issue50_smaller.py": "tests/engine/test_step_corners.py",
    "tests/test_loss_scale_flat.py": "tests/engine/test_loss_scale_flat.py",
    "tests/test_maximize.py": "tests/engine/test_maximize.py",
    "tests/test_plan_kept.py": "tests/engine/test_plan_kept.py",
    "tests/test_plan_trust.py": "tests/engine/test_plan_trust.py",
    "tests/test_python_checks.py": "tests/engine/test_python_checks.py",
    "tests/test_registered.py": "tests/engine/test_registered.py",
    "tests/test_resume.py": "tests/engine/test_resume.py",
    "tests/test_schedules.py": "tests/engine/test_schedules.py",
    "tests/test_snapshots_and_input_checks.py": "tests/engine/test_snapshots_and_input_checks.py",
    "tests/test_stage_order.py": "tests/engine/test_stage_order.py",
    "tests/test_step_atomic.py": "tests/engine/test_step_atomic.py",
    "tests/test_step_plan.py": "tests/engine/test_step_plan.py",
    # folded into the registry's table (one row per registered class, its reference and option sets)
    "tests/test_adabelief.py": "tests/engine/test_registry_table.py",
    "tests/test_parity_reference.py": "tests/engine/test_registry_table.py",
    # the kernels: foreach, compiled C/C++, Triton forms of the same rules, bit for bit
    "tests/test_compiled_maps.py": "tests/kernels/test_compiled_maps.py",
    "tests/test_execution_paths.py": "tests/kernels/test_execution_paths.py",
    "tests/test_kernel_pins.py": "tests/kernels/test_kernel_pins.py",
    "tests/test_loss_scaling_unscale.py": "tests/kernels/test_compiled_unscale.py",
    "tests/test_native_bounds.py": "tests/kernels/test_native_bounds.py",
    "tests/test_native_kernels.py": "tests/kernels/test_native_kernels.py",
    "tests/test_native_portable.py": "tests/kernels/test_native_portable.py",
    "tests/test_native_slices.py": "tests/kernels/test_native_slices.py",
    "tests/test_rule_scalars.py": "tests/kernels/test_rule_scalars.py",
    "tests/test_tensor_table.py": "tests/kernels/test_tensor_table.py",
    "tests/test_triton_cuda.py": "tests/kernels/test_triton_cuda.py",
    "tests/test_triton_cuda_parity.py": "tests/kernels/test_triton_cuda_parity.py",
    "tests/test_triton_generated.py": "tests/kernels/test_triton_generated.py",
    "tests/test_triton_gpu_check.py": "tests/kernels/test_triton_gpu_check.py",
    "tests/test_triton_kernels.py": "tests/kernels/test_triton_kernels.py",
    "tests/test_triton_numerics.py": "tests/kernels/test_triton_numerics.py",
    "tests/test_triton_slices.py": "tests/kernels/test_triton_slices.py",
    "tests/test_triton_steps.py": "tests/kernels/test_triton_steps.py",
    # TensorFlow's arithmetic and the recorded trajectories
    "tests/test_complex.py": "tests/numerics/test_complex.py",
    "tests/test_long_reference.py": "tests/numerics/test_long_reference.py",
    "tests/test_numerics.py": "tests/numerics/test_numerics.py",
    "tests/test_numerics_policy.py": "tests/numerics/test_numerics_policy.py",
    # the Keras 3 face, its wrappers (LossScaleOptimizer, MultiOptimizer) and TFRS's CompositeOptimizer
    "tests/test_composite.py": "tests/keras3/test_composite.py",
    "tests/test_keras3_base.py": "tests/keras3/test_keras3_base.py",
    "tests/test_keras3_ema_constraint.py": "tests/keras3/test_keras3_ema_constraint.py",
    "tests/test_keras3_errors.py": "tests/keras3/test_keras3_errors.py",
    "tests/test_keras3_family.py": "tests/keras3/test_keras3_family.py",
    "tests/test_keras3_new_family.py": "tests/keras3/test_keras3_muon_schedule_free_multi.py",
    "tests/test_keras3_sparse.py": "tests/keras3/test_keras3_sparse.py",
    "tests/test_keras3_sparse_one_pass.py": "tests/keras3/test_keras3_sparse_one_pass.py",
    "tests/test_keras_fidelity.py": "tests/keras3/test_keras_fidelity.py",
    "tests/test_loss_scale.py": "tests/keras3/test_keras3_loss_scale.py",
    "tests/test_serialization.py": "tests/keras3/test_serialization.py",
    "tests/test_two_tower.py": "tests/keras3/test_composite_two_tower.py",
    # tf.keras OptimizerV2
    "tests/test_legacy_base.py": "tests/legacy/test_legacy_base.py",
    "tests/test_legacy_loss_scale.py": "tests/legacy/test_legacy_loss_scale.py",
    "tests/test_legacy_numerics.py": "tests/legacy/test_legacy_numerics.py",
    "tests/test_legacy_training.py": "tests/legacy/test_legacy_training.py",
    # TF1
    "tests/test_v1_numerics.py": "tests/v1/test_v1_numerics.py",
    "tests/test_v1_optimizer.py": "tests/v1/test_v1_optimizer.py",
    # files in and out: readers, writers, configs, their bounds and fuzzers
    "tests/test_adopt.py": "tests/io/test_adopt_at_memory_floor.py",
    "tests/test_config_resolver.py": "tests/io/test_config_resolver.py",
    "tests/test_fuzz_targets.py": "tests/io/test_fuzz_targets.py",
    "tests/test_io_bounds.py": "tests/io/test_file_bounds.py",
    "tests/test_io_fuzz.py": "tests/io/test_reader_fuzz.py",
    "tests/test_issue50_readers.py": "tests/io/test_reader_links_and_types.py",
    "tests/test_keras_fuzz.py": "tests/io/test_keras_file_fuzz.py",
    "tests/test_keras_io.py": "tests/io/test_keras_files.py",
    "tests/test_keras_migration.py": "tests/io/test_keras_migration.py",
    "tests/test_keras_read_pass.py": "tests/io/test_keras_read_pass.py",
    "tests/test_keras_way_back.py": "tests/io/test_keras_way_back.py",
    "tests/test_keras_write_safety.py": "tests/io/test_keras_write_safety.py",
    "tests/test_migration2.py": "tests/io/test_recorded_migrations.py",
    "tests/test_readers_round3.py": "tests/io/test_reader_semantics.py",
    "tests/test_tf_checkpoint.py": "tests/io/test_tf_checkpoint.py",
    "tests/test_tf_way_back.py": "tests/io/test_tf_way_back.py",
    # the slotopt command
    "tests/test_bench_faces.py": "tests/cli/test_bench_faces.py",
    "tests/test_bench_report.py": "tests/cli/test_bench_report.py",
    "tests/test_cli.py": "tests/cli/test_cli.py",
    "tests/test_showcase.py": "tests/cli/test_demo.py",
    # slotopt among PyTorch's tools: torch.optim's protocol, torch.save, DDP/FSDP, Lightning, HF
    "tests/test_checkpoints.py": "tests/pytorch/test_torch_save.py",
    "tests/test_copies_and_groups.py": "tests/pytorch/test_copies_and_groups.py",
    "tests/test_distributed.py": "tests/pytorch/test_distributed.py",
    "tests/test_first_contact.py": "tests/pytorch/test_first_contact.py",
    "tests/test_integrations.py": "tests/pytorch/test_integrations.py",
    "tests/test_issue50_torch_tools.py": "tests/pytorch/test_torch_tools.py",
    "tests/test_torch_citizen.py": "tests/pytorch/test_torch_citizen.py",
    "tests/test_torch_protocol.py": "tests/pytorch/test_torch_protocol.py",
    # the project itself: lint, package layout, documentation and its examples
    "tests/test_docs.py": "tests/project/test_docs.py",
    "tests/test_docstrings.py": "tests/project/test_docstrings.py",
    "tests/test_examples.py": "tests/project/test_distributed_example.py",
    "tests/test_layout.py": "tests/project/test_package_layout.py",
    "tests/test_lint.py": "tests/project/test_lint.py",
    "tests/test_readme.py": "tests/project/test_readme.py",
    "tests/test_v1_docs.py": "tests/project/test_tf1_migration_page.py",
    # sorted at the merge of the fourth session
    "tests/test_api_corners.py": "tests/keras3/test_keras_api_corners.py",
    "tests/test_bundle_budget.py": "tests/io/test_bundle_read_budget.py",
    "tests/test_capturable.py": "tests/kernels/test_capturable_steps.py",
    "tests/test_capturable_later.py": "tests/pytorch/test_capturable_flag_on_join.py",
    "tests/test_checkpoint_build.py": "tests/io/test_checkpoint_one_build.py",
    "tests/test_error_names.py": "tests/engine/test_error_names.py",
    "tests/test_gradient_aliasing_swapped.py": "tests/engine/test_gradient_aliasing_swapped.py",
    # the fifth session's (issue 48)
    "tests/test_triton_layouts.py": "tests/kernels/test_triton_layouts.py",
    "tests/test_triton_launcher.py": "tests/kernels/test_triton_launcher.py",  # (issue 48, written there)
    # issue 48, s5-numerics: the device C-library functions
    "tests/test_triton_libm.py": "tests/kernels/test_triton_libm.py",
}

#: Text files whose references to test paths are rewritten (the table itself, this file, is not).
_TEXT = (".py", ".md", ".txt", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".c", ".cpp", ".h", ".inc", ".sh")
_BY_NAME = ("Makefile", "run")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def move(dry_run: bool = False) -> list[tuple[str, str]]:
    """``git mv`` every file of the table still at its old path (and not yet at its new one)."""
    moved = []
    for old, new in TABLE.items():
        if (ROOT / old).exists() and not (ROOT / new).exists():
            moved.append((old, new))
            if not dry_run:
                (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
                _git("mv", old, new)
    return moved


def _patterns() -> list[tuple[re.Pattern[str], str]]:
    """An old path (``tests/test_x.py``) becomes the new one; an old bare basename (``test_x.py``, not after a
    slash or a word character) becomes the new basename, where the file was renamed."""
    found = []
    for old, new in TABLE.items():
        found.append((re.compile(r"(?<![\w/.])" + re.escape(old) + r"(?!\w)"), new))
        old_name, new_name = old.rsplit("/", 1)[1], new.rsplit("/", 1)[1]
        if old_name != new_name:
            found.append((re.compile(r"(?<![\w/.])" + re.escape(old_name) + r"(?!\w)"), new_name))
            # a test file importing another's helpers: ``from test_x import ...`` / ``import test_x``
            found.append((re.compile(r"(?<=\bfrom )" + re.escape(old_name[:-3]) + r"(?= import\b)"), new_name[:-3]))
            found.append((re.compile(r"(?<=\bimport )" + re.escape(old_name[:-3]) + r"\b"), new_name[:-3]))
    return found


def rewrite_references(dry_run: bool = False) -> list[str]:
    """Rewrites references to old test paths in every tracked text file (docs, comments, Makefile targets,
    tools, other tests' docstrings); recorded data under tests/data is left as recorded."""
    patterns, changed = _patterns(), []
    this = Path(__file__).resolve()
    for name in _git("ls-files").splitlines():
        path = ROOT / name
        if (name.startswith("tests/data/") or path.resolve() == this or not path.is_file()
                or not (name.endswith(_TEXT) or path.name in _BY_NAME)):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new_text = text
        for pattern, replacement in patterns:
            new_text = pattern.sub(replacement, new_text)
        if new_text != text:
            changed.append(name)
            if not dry_run:
                path.write_text(new_text, encoding="utf-8")
    return changed


def check() -> list[str]:
    """What the table leaves to do by hand: root test files it does not sort, basenames used twice."""
    problems = [f"{p.relative_to(ROOT)}: not in tools/sort_tests.py's TABLE (sort it by hand)"
                for p in sorted((ROOT / "tests").glob("test_*.py")) if str(p.relative_to(ROOT)) not in TABLE]
    # an old path back beside its new one: a merge brought edits to a file moved or folded here (the registry
    # table took test_adabelief.py and test_parity_reference.py): carry them into the new file, git rm the old
    problems += [f"{old}: already at {new} (moved or folded): carry its changes there and git rm it"
                 for old, new in TABLE.items() if (ROOT / old).exists() and (ROOT / new).exists()]
    seen: dict[str, Path] = {}
    for p in sorted((ROOT / "tests").rglob("test_*.py")):
        if "data" in p.relative_to(ROOT / "tests").parts:
            continue
        if p.name in seen:
            problems.append(f"{p.relative_to(ROOT)}: same basename as {seen[p.name].relative_to(ROOT)} "
                            "(pytest's default import mode imports test files by basename)")
        seen.setdefault(p.name, p)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="list what the table does not sort; change nothing")
    parser.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        print("\n".join(problems) if problems else "every test file is sorted")
        return 1 if problems else 0
    for old, new in move(args.dry_run):
        print(f"git mv {old} {new}")
    for name in rewrite_references(args.dry_run):
        print(f"rewrote references in {name}")
    problems = check()
    if problems:
        print("\n".join(problems), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
