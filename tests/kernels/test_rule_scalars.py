"""The scalar vector of each compiled rule is described once (``kernels/native/scalars.py``, next to its foreach
kernel), and everything else follows it or is checked against it here: the Python marshalling is generated from it,
the C header ``rules_scalars.h`` must be the one generated from it, each C rule in ``rules.inc`` must read exactly
its entries by name and kind, and each Triton kernel its numbers at their positions and its flags as its
``constexpr`` parameters. Each check is also shown to fail on a copy with one thing changed."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import slotopt.kernels as kernels
from slotopt.kernels import adam, native, sgd
from slotopt.kernels.native import scalars
from slotopt.kernels.native.scalars import Flag, Integer, Scalar

for _module in pkgutil.walk_packages(kernels.__path__, "slotopt.kernels."):
    importlib.import_module(_module.name)  # every description registers when its kernel module is imported

NATIVE = Path(native.__file__).parent
TRITON = NATIVE.parent / "triton"
RULES_INC = (NATIVE / "rules.inc").read_text()
HEADER = (NATIVE / "rules_scalars.h").read_text()
TRITON_SOURCES = {name: (TRITON / name).read_text() for name in ("rules.py", "rules_tf.py")}


def generated_sources() -> dict[str, str]:
    """The hand-written Triton sources (the rules on slices, the bodies) and each dense kernel's generated source
    (``kernels/triton/generate.py``), as files to parse: what the compiler reads."""
    pytest.importorskip("triton")
    from slotopt.kernels.triton import rules

    rules.build()
    return {**TRITON_SOURCES, **{f"<{rule}>": "@triton.jit\n" + rules.source(rule) for rule in rules.RULES}}
KINDS = {"SV": "scalar", "FLAG": "flag", "INTEGER": "integer"}


def c_rules(text: str) -> dict[str, str]:
    """Each rule's body in ``rules.inc``, by name (dense rules and rules on slices)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^(?:SLICE_)?RULE\((\w+)\) \{\n(.*?)^\}", text, re.S | re.M)}


def c_locals(body: str) -> dict[str, set[str]]:
    """Entry name -> the C locals a rule reads it into (``const T lr = SF(SV(sgd, lr))``)."""
    found: dict[str, set[str]] = {}
    for m in re.finditer(r"\b(\w+) = S[FH]\(-?SV\(\w+, (\w+)\)\)", body):
        found.setdefault(m.group(2), set()).add(m.group(1))
    return found


def check_c(descriptions: dict[str, scalars.Description], text: str) -> list[str]:
    """What in ``rules.inc`` disagrees with the descriptions (empty: nothing)."""
    problems = []
    for rule, body in c_rules(text).items():
        description = descriptions.get(rule)
        if description is None:
            problems.append(f"{rule}: a C rule with no description of its scalars")
            continue
        if "s_[" in body:
            problems.append(f"{rule}: reads s_[...] by position, not by name")
        kinds = {entry.name: entry.kind for entry in description.entries}
        read = set()
        for m in re.finditer(r"\b(SV|FLAG|INTEGER)\((\w+), (\w+)\)", body):
            macro, named, name = m.groups()
            if named != rule:
                problems.append(f"{rule}: reads {macro}({named}, {name}), a scalar of another rule")
            elif kinds.get(name) != KINDS[macro]:
                problems.append(f"{rule}: reads {name} as {KINDS[macro]}, described as {kinds.get(name)}")
            read.add(name)
        for name in kinds.keys() - read:
            problems.append(f"{rule}: never reads {name}")
    return problems


def _sv_position(call: ast.Call, local: str, kernel: str) -> tuple[int, list[str]]:
    """The position a Triton scalar read takes (``_sv(s_ptr, k, Sk, BY_VALUE)`` or ``tl.load(s_ptr + k)``)."""
    if isinstance(call.func, ast.Name) and call.func.id == "_sv":
        k, by_value = call.args[1], call.args[2]
        if not (isinstance(k, ast.Constant) and isinstance(by_value, ast.Name)):
            return -1, [f"{kernel}: {local} = _sv(...) without a literal position"]
        if by_value.id != f"S{k.value}":
            return k.value, [f"{kernel}: {local} reads position {k.value} from the vector but {by_value.id} by value"]
        return k.value, []
    pointer = call.args[0]
    if isinstance(pointer, ast.Name):
        return 0, []
    if isinstance(pointer, ast.BinOp) and isinstance(pointer.right, ast.Constant):
        return pointer.right.value, []
    return -1, [f"{kernel}: {local} reads the scalar vector at no literal position"]


def _is_scalar_read(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name) and node.func.id == "_sv":
        return True
    pointer = node.args[0] if node.args else None
    return (isinstance(node.func, ast.Attribute) and node.func.attr == "load" and pointer is not None
            and "s_ptr" in {ast.unparse(pointer), ast.unparse(getattr(pointer, "left", pointer))})


def triton_kernels(sources: dict[str, str]) -> dict[str, ast.FunctionDef]:
    """Each Triton kernel (a jit function that is not a helper), by name."""
    found = {}
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and any(
                    "jit" in ast.unparse(d) for d in node.decorator_list):
                found[node.name] = node
    return found


def check_triton(descriptions: dict[str, scalars.Description], sources: dict[str, str], text: str) -> list[str]:
    """What in the Triton kernels disagrees with the descriptions (empty: nothing). A local a scalar is read into
    must be named as its entry or as a C local of the same entry (so that a position read for the wrong entry
    shows)."""
    from slotopt.kernels import triton

    problems = []
    found = triton_kernels(sources)
    listed = set(triton.RULES) | set(triton.SLICE_RULES)
    if set(found) != listed:
        problems.append(f"the kernels defined {sorted(found)} are not those listed {sorted(listed)}")
    bodies = c_rules(text)
    for name, kernel in found.items():
        description = descriptions.get(name)
        if description is None:
            problems.append(f"{name}: a Triton kernel with no description of its scalars")
            continue
        entries = description.entries
        aliases = c_locals(bodies.get(name, ""))
        parameters = [a.arg for a in kernel.args.args]
        if name in triton.RULES:
            values = [p for p in parameters if re.fullmatch(r"S\d+", p)]
            if values != [f"S{i}" for i in range(len(entries))]:
                problems.append(f"{name}: scalar parameters {values} for {len(entries)} scalars")
            constexprs = set(parameters[parameters.index("BY_VALUE") + 1:]) - {"ALIGNED", "BLOCK", "ROW"}
            flags = {flag for flag, _ in description.flags}
            if constexprs != flags:
                problems.append(f"{name}: compile-time flags {sorted(constexprs)}, described {sorted(flags)}")
        read = set()
        for node in ast.walk(kernel):
            if not (isinstance(node, ast.Assign) and _is_scalar_read(node.value)):
                continue
            local = ast.unparse(node.targets[0])
            position, found_problems = _sv_position(node.value, local, name)
            problems += found_problems
            if not 0 <= position < len(entries):
                problems.append(f"{name}: {local} reads position {position}, outside its {len(entries)} scalars")
                continue
            entry = entries[position]
            if entry.kind != "scalar":
                problems.append(f"{name}: {local} reads position {position}, the {entry.kind} {entry.name}")
            elif local != entry.name and local not in aliases.get(entry.name, set()):
                problems.append(f"{name}: {local} reads position {position}, which is {entry.name} "
                                f"(read as {sorted(aliases.get(entry.name, set()))} in C)")
            read.add(position)
        numbers = {i for i, entry in enumerate(entries) if entry.kind == "scalar"}
        for position in numbers - read:
            problems.append(f"{name}: never reads {entries[position].name} (position {position})")
    return problems


def _unassigned_reads(sources: dict[str, str]) -> list[str]:
    """Scalar reads used in an expression rather than assigned to a named local (no name to check them by)."""
    bad = []
    for name, kernel in triton_kernels(sources).items():
        assigned = {id(node.value) for node in ast.walk(kernel) if isinstance(node, ast.Assign)}
        bad += [f"{name}: {ast.unparse(n)}" for n in ast.walk(kernel) if _is_scalar_read(n) and id(n) not in assigned]
    return bad


def test_the_header_is_the_one_generated_from_the_descriptions():
    assert HEADER == scalars.header(), "run tools/write_rules_scalars.py, then pip install -e ."
    # a rule described outside slotopt (a test's) has no C form: not in the header
    native.compiled("test_rule_scalars_outside", 2, (Scalar("lr"),))(_kernel)
    assert "test_rule_scalars_outside" in scalars.DESCRIPTIONS and HEADER == scalars.header()


def test_every_c_rule_reads_exactly_its_described_scalars_by_name_and_kind():
    assert check_c(scalars.DESCRIPTIONS, RULES_INC) == []
    assert set(c_rules(RULES_INC)) <= set(scalars.DESCRIPTIONS)
    assert len(c_rules(RULES_INC)) == 25  # every rule was found (23 dense, 2 on slices)


def test_every_triton_kernel_reads_its_scalars_at_their_described_positions():
    sources = generated_sources()
    assert check_triton(scalars.DESCRIPTIONS, sources, RULES_INC) == []
    assert _unassigned_reads(sources) == []
    inline = "w - (w * _sv(s_ptr, 6, S6, BY_VALUE)) * wd_lr"  # a read with no local to check its name by
    changed = sources["<sgd>"].replace("_b_sgd(w, g,", f"_b_sgd({inline}, g,", 1)
    assert len(_unassigned_reads({**sources, "<sgd>": changed})) == 1


def _swapped(description: scalars.Description, a: str, b: str) -> scalars.Description:
    entries = list(description.entries)
    i, j = description.position(a), description.position(b)
    entries[i], entries[j] = entries[j], entries[i]
    return dataclasses.replace(description, entries=tuple(entries))


def test_a_description_changed_in_a_copy_disagrees_with_the_committed_header_and_the_triton_kernels():
    from slotopt.kernels.triton import generate

    sources = generated_sources()
    changed = dict(scalars.DESCRIPTIONS)
    changed["adam"] = _swapped(changed["adam"], "one_minus_beta_1", "one_minus_beta_2")
    assert scalars.header(changed) != HEADER
    assert "#define SV_adam_one_minus_beta_2 1\n" in scalars.header(changed)
    assert check_c(changed, RULES_INC) == []  # C reads by name: regenerating the header is all it takes
    problems = check_triton(changed, sources, RULES_INC)
    assert "adam: one_minus_beta_1 reads position 1, which is one_minus_beta_2 (read as ['omb2'] in C)" in problems
    # ... and so does Triton: the kernel generated from the changed description reads each number where it is now
    body = ["w", "g", "m", "v", "vh", "alpha", "one_minus_beta_1", "one_minus_beta_2", "epsilon", "weight_decay",
            "weight_decay_lr", "AMSGRAD", "DECAY"]
    regenerated = "@triton.jit\n" + generate.source(changed["adam"], "_b_adam", body)
    assert check_triton(changed, {**sources, "<adam>": regenerated}, RULES_INC) == []
    assert "one_minus_beta_2 = _sv(s_ptr, 1, S1, BY_VALUE)" in regenerated
    changed["sgd"] = _swapped(changed["sgd"], "decay", "weight_decay")  # a flag where a number was
    problems = check_triton(changed, sources, RULES_INC)
    assert "sgd: weight_decay reads position 2, the flag decay" in problems


def test_one_index_changed_in_a_copy_of_a_triton_kernel_is_found():
    sources = generated_sources()
    source = sources["<adam>"]
    line = "    epsilon = _sv(s_ptr, 3, S3, BY_VALUE)\n"
    assert source.count(line) == 1
    changed = source.replace(line, "    epsilon = _sv(s_ptr, 2, S2, BY_VALUE)\n", 1)
    problems = check_triton(scalars.DESCRIPTIONS, {**sources, "<adam>": changed}, RULES_INC)
    assert "adam: epsilon reads position 2, which is one_minus_beta_2 (read as ['omb2'] in C)" in problems
    assert "adam: never reads epsilon (position 3)" in problems
    mismatched = source.replace(line, "    epsilon = _sv(s_ptr, 3, S2, BY_VALUE)\n", 1)
    problems = check_triton(scalars.DESCRIPTIONS, {**sources, "<adam>": mismatched}, RULES_INC)
    assert "adam: epsilon reads position 3 from the vector but S2 by value" in problems
    renamed = source.replace("AMSGRAD: tl.constexpr", "AMS: tl.constexpr", 1)
    problems = check_triton(scalars.DESCRIPTIONS, {**sources, "<adam>": renamed}, RULES_INC)
    assert "adam: compile-time flags ['AMS', 'DECAY'], described ['AMSGRAD', 'DECAY']" in problems


@pytest.mark.parametrize("parameters,message", [
    (["w", "g", "m", "v", "vh", "alpha", "epsilon", "eps"], "body parameter 'eps' is neither a number nor a flag"),
    (["w", "g", "m", "v", "vh", "alpha", "AMSGRAD", "NESTEROV"], "'NESTEROV' is neither a number nor a flag"),
    (["w", "g", "m"], "fewer than its 5 operand lists"),
    (["w", "g", "m", "v", "_t", "alpha"], "'_t' is a name the generated kernel uses itself"),
    (["w", "g", "m", "v", "vh", "S3"], "'S3' is a name the generated kernel uses itself"),
    (["w", "g", "m", "v", "vh", "BLOCK"], "'BLOCK' is a name the generated kernel uses itself"),
])
def test_a_triton_body_that_does_not_fit_its_description_is_refused_when_its_kernel_is_generated(parameters,
                                                                                               message):
    from slotopt.kernels.triton import generate

    with pytest.raises(TypeError, match=re.escape(message)):
        generate.source(scalars.DESCRIPTIONS["adam"], "_b_adam", parameters)


def test_one_read_changed_in_a_copy_of_rules_inc_is_found():
    changed = RULES_INC.replace("eps = SH(SV(adam, epsilon))", "eps = SH(SV(adam, weight_decay))", 1)
    assert changed != RULES_INC
    assert check_c(scalars.DESCRIPTIONS, changed) == ["adam: never reads epsilon"]
    changed = RULES_INC.replace("FLAG(adam, amsgrad)", "FLAG(adam, alpha)", 1)
    assert "adam: reads alpha as flag, described as scalar" in check_c(scalars.DESCRIPTIONS, changed)
    changed = RULES_INC.replace("wd_lr = SH(SV(adam, weight_decay_lr))", "wd_lr = SH(SV(sgd, weight_decay_lr))", 1)
    assert "adam: reads SV(sgd, weight_decay_lr), a scalar of another rule" in check_c(scalars.DESCRIPTIONS, changed)
    changed = RULES_INC.replace("SH(SV(adam, epsilon))", "SH(s_[3])", 1)
    assert "adam: reads s_[...] by position, not by name" in check_c(scalars.DESCRIPTIONS, changed)


def test_the_generated_marshalling_gives_the_vectors_the_rules_read():
    w = [torch.zeros(6, 4)]
    adam_vector = adam.adam.scalar_vector
    assert adam_vector(w, w, w, w, None, alpha=0.1, one_minus_beta_1=0.2, one_minus_beta_2=0.3, epsilon=1e-7) == (
        0.1, 0.2, 0.3, 1e-7, False, False, 0.0, 0.0)
    assert adam_vector(w, w, w, w, w, alpha=0.1, one_minus_beta_1=0.2, one_minus_beta_2=0.3, epsilon=1e-7,
                       weight_decay=0.04, weight_decay_lr=0.5) == (0.1, 0.2, 0.3, 1e-7, True, True, 0.04, 0.5)
    rows = scalars.DESCRIPTIONS["apply_adagrad"].vector
    assert rows(w, w, w, lr=0.5, rows=True) == (0.5, False, 4) and rows(w, w, w, lr=0.5) == (0.5, False, 0)
    assert scalars.DESCRIPTIONS["sparse_apply_rmsprop"].vector(
        w, w, w, w, None, lr=1, rho=2, one_minus_rho=3, momentum=4, epsilon=5) == (1, 2, 3, 4, 5, False, 4)
    # variants with no compiled form: None, and the foreach kernel runs
    ftrl = scalars.DESCRIPTIONS["ftrl_root"].vector
    assert ftrl(w, w, w, w, lr=1, power=-0.5, l1=2, two_l2=3, shrinkage=4) is None
    assert ftrl(w, w, w, w, lr=1, power=-0.5, l1=2, two_l2=3, shrinkage=4, root=True) == (1, 2, 3, 4, False)
    assert sgd.proximal_gradient_descent.scalar_vector(w, w, lr=1, lr_l1=2, denominator=3, l1_positive=True,
                                                       widen=True) is None
    assert scalars.DESCRIPTIONS["sgd_slices"].vector(lr=0.25) == (0.25,)
    assert native.SLICE_RULES == {"sgd_slices": False, "adagrad_slices": True}


def test_every_description_s_marshalling_is_generated_from_its_entries_in_order():
    for rule, description in scalars.DESCRIPTIONS.items():
        source = description.vector.__source__
        assert source.startswith(f"def {rule}_scalars("), rule
        returned, at = source.split("return ", 1)[1], 0
        for i, entry in enumerate(description.entries):
            expression = {"scalar": entry.name, "flag": f"{getattr(entry, 'given', None)} is not None"
                          if getattr(entry, "given", None) else entry.name, "integer": f"_f{i}("}[entry.kind]
            at = returned.index(expression, at)  # in the description's order


def _kernel(params, grads, v_hat=None, *, lr, beta, flag=False, optional=None):
    return None


@pytest.mark.parametrize("entries,foreach_if,message", [
    ((Scalar("lr"), Scalar("bta")), None, "scalar 'bta' is not an argument of the kernel"),
    ((Scalar("lr"), Flag("present", given="v_hta")), None, "flag argument 'v_hta' is not an argument"),
    ((Scalar("lr"), Scalar("lr")), None, "a name is given twice"),
    ((Scalar("lr"), Flag("unknown")), None, "flag 'unknown' is not an argument of the kernel"),
    ((Scalar("lr"), Integer("rows", len, ("params", 1.5))), None, "neither a name nor a bool"),
    ((Scalar("lr"), Scalar("optional", absent="0")), None, "`absent` of 'optional' must be a finite number"),
    ((Scalar("lr"), Scalar("optional", absent=float("inf"))), None, "must be a finite number"),
    ((Scalar("lr"),), "not flg", "foreach_if names 'flg'"),
    ((Scalar("lr"), "beta"), None, "is not a Scalar, a Flag or an Integer"),
])
def test_a_description_that_does_not_fit_its_kernel_is_refused_when_the_module_is_imported(entries, foreach_if,
                                                                                          message):
    before = dict(scalars.DESCRIPTIONS)
    with pytest.raises(TypeError, match=re.escape(message)):
        native.compiled("test_rule_scalars_probe", 3, entries, foreach_if=foreach_if)(_kernel)
    assert scalars.DESCRIPTIONS == before  # nothing registered


def test_a_rule_described_twice_in_two_modules_is_refused():
    description = scalars.DESCRIPTIONS["lion"]
    other = dataclasses.replace(description, module="elsewhere")
    with pytest.raises(TypeError, match="described twice"):
        scalars._register(other)
    assert scalars.DESCRIPTIONS["lion"] is description
