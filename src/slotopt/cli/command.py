"""The ``slotopt`` command: ``slotopt demo``, ``slotopt parity``, ``slotopt bench``, ``slotopt info`` and
``slotopt inspect``.

Exit codes: 0 success; 1 a parity case failed or raised (or a demo/benchmark run raised); 2 a usage error
(bad arguments, unknown optimizer, unavailable device, missing optional dependency).
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional, TextIO

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

_API_MODULES = {"keras3": "slotopt", "legacy": "slotopt.legacy", "v1": "slotopt.v1", "composite": "slotopt.legacy"}


class UsageError(Exception):
    """A command-line mistake: reported as ``slotopt <command>: error: ...`` with exit code 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``slotopt`` command (one sub-parser per subcommand)."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="slotopt",
        description="slotopt: the Keras optimizer system on PyTorch tensors, with Keras-exact numerics.",
        epilog="Exit codes: 0 ok, 1 parity failure (or a run that raised), 2 usage error. "
               "Run 'slotopt COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"slotopt {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="why slotopt: Keras's recorded runs replayed by slotopt and by torch.optim, and a Keras file continued",
        description="Replays 1000-step runs recorded from Keras 3 (same initial weights, same gradients) with "
                    "slotopt's Keras optimizers and with their nearest torch.optim look-alikes, and continues a "
                    "Keras 3 training run from its .keras file; prints how far each lands from Keras's own weights "
                    "and writes a PNG. Needs: pip install 'slotopt[demo]'. With --optimizer, trains those "
                    "optimizers on scikit-learn's digits instead (needs: pip install 'slotopt[digits]').",
        epilog='Examples: slotopt demo    |    slotopt demo --optimizer adam --optimizer \'{"class_name": '
               '"RMSprop", "config": {"learning_rate": 0.001}}\' --epochs 5',
    )
    demo.add_argument(
        "--optimizer", action="append", metavar="NAME_OR_JSON", default=None,
        help="train this optimizer on scikit-learn's digits instead: a name (adam, sgd, rmsprop, ...) or a "
             'JSON object {"class_name": ..., "config": {...}}; repeat to compare several',
    )
    demo.add_argument("--epochs", type=_positive_int, default=15, metavar="N", help="epochs per digits training, with --optimizer (default 15)")
    demo.add_argument("--out", default="slotopt-demo.png", metavar="PATH",
                      help="where to write the PNG (default ./slotopt-demo.png)")

    parity = commands.add_parser(
        "parity",
        help="replay the bundled Keras reference trajectories and report the deviation per case",
        description="Replays every reference case recorded from the real Keras 3, tf.keras legacy, TF1 and "
                    "TFRS optimizers through slotopt, and prints the largest absolute and relative error per "
                    "case. Exits with 1 when any case fails or cannot run.",
    )
    parity.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    parity.add_argument("--api", choices=("keras3", "legacy", "v1", "composite"), action="append", default=None,
                        help="only the cases of this generation (repeatable; default all)")
    parity.add_argument("--case", action="append", default=None, metavar="PATTERN",
                        help="only cases whose id matches this fnmatch pattern, e.g. 'keras3/adam*' (repeatable)")
    parity.add_argument("-v", "--verbose", action="store_true", help="list each out-of-tolerance value")

    bench = commands.add_parser(
        "bench",
        help="optimizer step time: slotopt vs torch.optim (for-loop, foreach, fused), plus a sparse embedding row",
        description="Times one optimizer step (median over several steps after a warm-up) for Adam, AdamW, "
                    "SGD with momentum, RMSprop and Adagrad on three workloads, for slotopt and for torch.optim's "
                    "for-loop, foreach and fused implementations; then a 1M x 64 embedding table with 1K touched "
                    "rows per step, with peak memory. Prints a table and writes a bar chart PNG.",
    )
    bench.add_argument("--quick", action="store_true",
                       help="a check that everything runs, in about a minute: every contender and figure on small "
                            "workloads, 3 timed steps after 1 warm-up, all in this process")
    bench.add_argument("--png", default="slotopt-bench.png", metavar="PATH",
                       help="where to write the bar chart (default ./slotopt-bench.png)")
    bench.add_argument("--no-png", dest="png", action="store_const", const=None,
                       help="print the tables only (no matplotlib needed)")
    bench.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    bench.add_argument("--workload", action="append", default=None,
                       choices=("large", "model", "small", "sparse", "faces", "keras3-sparse", "options"),
                       help="only this workload (repeatable; default all but options, the cost of each option "
                            "against the plain step)")
    bench.add_argument("--steps", type=_positive_int, default=None, metavar="N",
                       help="timed steps per measurement (default 20, 3 with --quick)")
    commands.add_parser(
        "info",
        help="which kernel path is active (compiled one-pass kernels or foreach), and the versions in use",
        description="Prints slotopt's and torch's versions, the thread count, and which kernel path runs the "
                    "update rules: 'native' (the compiled one-pass CPU kernels) or 'foreach' (torch._foreach_* "
                    "ops), with the reason. SLOTOPT_KERNELS=auto|native|foreach selects the path. Exits with 1 "
                    "when SLOTOPT_KERNELS=native but the compiled kernels cannot be loaded.",
    )
    inspect = commands.add_parser(
        "inspect",
        help="list a checkpoint's variables, optimizer, slots and iteration count (.keras, .h5, TF checkpoints)",
        description="Reads a training checkpoint as data (no TensorFlow) and lists its variables (name, shape, "
                    "dtype), its optimizer (generation, and class when the file names it), the slots of every "
                    "variable, the optimizer's own variables and the iteration count. Exits with 1 when the file "
                    "is not a readable checkpoint.",
        epilog="Example: slotopt inspect runs/ckpts  (a directory with a `checkpoint` state file)",
    )
    inspect.add_argument("path", metavar="PATH",
                         help="a .keras or .h5 file, a TensorFlow checkpoint prefix or .index file, or a directory "
                              "holding a `checkpoint` state file")
    return parser


# ------------------------------------------------------------------------------------------- inspect
def _cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    from .inspect import inspect_checkpoint

    try:
        inspect_checkpoint(args.path, out)
    except FileNotFoundError as err:
        raise UsageError(str(err).strip('"')) from err
    except (ValueError, OSError, ImportError) as err:
        message = str(err)  # (the readers' errors name the file already: not twice)
        print(f"slotopt inspect: {message if message.startswith(args.path) else f'{args.path}: {message}'}",
              file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


# ------------------------------------------------------------------------------------------- info
def _cmd_info(args: argparse.Namespace, out: TextIO) -> int:
    import torch

    from .. import __version__
    from ..kernels import native, triton
    from ..kernels.native import tensor_table

    state = native.status()
    print(f"slotopt {__version__} (torch {torch.__version__}, {state['threads']} threads)", file=out)
    print(f"kernels: {state['path']} ({state['reason']}; SLOTOPT_KERNELS={state['mode']})", file=out)
    if state["library"]:
        print(f"library: {state['library']}", file=out)
    from ..numerics import cpu, fused_rsqrt_exact

    # (TensorFlow's fused float32 Adagrad/ProximalAdagrad/Adadelta kernels take the processor's rsqrtps estimate)
    estimate = (f"TensorFlow's bits of the rsqrtps kernels as on {cpu.vendor()} processors" if fused_rsqrt_exact()
                else "no rsqrtps estimate without the compiled library: fused float32 Adagrad, ProximalAdagrad and "
                     "Adadelta can be one ULP off TensorFlow's")
    print(f"cpu: {cpu.vendor()} ({estimate})", file=out)
    table = tensor_table.status()
    print(f"step checks: {'C++' if table['active'] else 'Python'} ({table['reason']})", file=out)
    cuda = triton.status()
    if state["mode"] == "foreach":  # the switch covers the CUDA path too (kernels/native: compiled())
        cuda = f"foreach kernels (SLOTOPT_KERNELS=foreach; otherwise: {cuda})"
    print(f"cuda: {cuda}", file=out)
    return EXIT_FAILURE if state["error"] else EXIT_OK


# ------------------------------------------------------------------------------------------- demo
def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from . import demo

    try:
        if args.optimizer is None:
            from .showcase import run_showcase

            return run_showcase(out=args.out, stream=out)
        identifiers = [demo.parse_optimizer_arg(t) for t in args.optimizer]
        return demo.run_demo(identifiers, epochs=args.epochs, out=args.out, stream=out)
    except demo.DemoError as err:
        raise UsageError(str(err)) from err


# ------------------------------------------------------------------------------------------- parity
def _check_device(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available (this torch build or machine has no GPU).")


def _missing_class(case: dict[str, Any]) -> Optional[str]:
    """``"slotopt.legacy.Nadam"`` when the class a case needs does not exist yet, else None."""
    api = case["api"]
    module_name = _API_MODULES.get(api, "slotopt")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return module_name
    needed = [case["optimizer"]] if api != "composite" else [p["optimizer"] for p in case.get("parts", [])]
    if "inner" in case:
        needed.append(case["inner"]["optimizer"])
    for name in needed:
        if not isinstance(getattr(module, name, None), type):
            return f"{module_name}.{name}"
    if api == "composite":
        import slotopt

        if not hasattr(slotopt, "CompositeOptimizer"):
            return "slotopt.CompositeOptimizer"
    return None


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _cmd_parity(args: argparse.Namespace, out: TextIO) -> int:
    from .reference import load_cases, replay

    _check_device(args.device)
    cases = load_cases()
    if args.api:
        cases = [c for c in cases if c["api"] in args.api]
    if args.case:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c["id"], p) for p in args.case)]
    if not cases:
        raise UsageError(f"no reference case matches --api {args.api} --case {args.case}")

    header = ("case", "generation", "optimizer", "max abs err", "max rel err", "status")
    rows: list[tuple[str, ...]] = []
    notes: dict[int, list[str]] = {}
    counts = {"OK": 0, "FAIL": 0, "ERROR": 0}
    for case in cases:
        optimizer = case["optimizer"] if "inner" not in case else f"{case['optimizer']}({case['inner']['optimizer']})"
        missing = _missing_class(case)
        if missing is not None:
            status, abs_err, rel_err = "ERROR", "-", "-"
            notes[len(rows)] = [f"not implemented yet: {missing}"]
        else:
            try:
                result = replay(case, device=args.device)
            except Exception as err:  # a case that cannot run is a row, not a crash
                status, abs_err, rel_err = "ERROR", "-", "-"
                notes[len(rows)] = [f"{type(err).__name__}: {_first_line(str(err))}"]
            else:
                status = "OK" if result.ok else "FAIL"
                abs_err, rel_err = f"{result.max_abs_error:.2e}", f"{result.max_rel_error:.2e}"
                if not result.ok:
                    shown = result.failures if args.verbose else result.failures[:1]
                    notes[len(rows)] = shown + ([f"... {len(result.failures) - 1} more (use -v)"]
                                                if not args.verbose and len(result.failures) > 1 else [])
        counts[status] += 1
        rows.append((case["id"], case["api"], optimizer, abs_err, rel_err, status))

    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in (3, 4) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    print(line(header), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for i, row in enumerate(rows):
        print(line(row), file=out)
        for note in notes.get(i, []):
            print(f"    {note}", file=out)
    print(f"\nparity on {args.device}: {counts['OK']} OK, {counts['FAIL']} FAIL, {counts['ERROR']} ERROR "
          f"({len(rows)} cases)", file=out)
    return EXIT_OK if counts["FAIL"] == 0 and counts["ERROR"] == 0 else EXIT_FAILURE


# ------------------------------------------------------------------------------------------- bench
def _cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    from . import bench, demo

    _check_device(args.device)
    try:
        return bench.run_bench(quick=args.quick, png=args.png, device=args.device, workloads=args.workload,
                               steps=args.steps, stream=out)
    except demo.DemoError as err:
        raise UsageError(str(err)) from err


# ------------------------------------------------------------------------------------------- main
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the ``slotopt`` command and returns its exit code (also the console-script entry point)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with 2 on a usage error, 0 for --help
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    handler = {"demo": _cmd_demo, "parity": _cmd_parity, "bench": _cmd_bench, "info": _cmd_info,
               "inspect": _cmd_inspect}[args.command]
    try:
        code = handler(args, sys.stdout)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        return code
    except UsageError as err:
        print(f"slotopt {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``slotopt info | head -1``): stop quietly, and keep Python's final flush of
        # stdout from raising again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
