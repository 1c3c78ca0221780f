"""The compiled kernels are portable: each variant's machine code stays within its instruction set, the checks the
loader runs before choosing a variant are baseline code in every variant, and every variant computes the same
bits (setup.py builds them; kernels/native loads the best one the processor runs)."""

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from slotopt.kernels import native
from slotopt.kernels.native import variants

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARIES = {name: os.path.join(os.path.dirname(native.__file__), file) for name, file in native.VARIANTS.items()}
BUILT = {name: path for name, path in LIBRARIES.items() if os.path.exists(path)}
X86_64 = os.uname().machine == "x86_64"

# Instructions above x86-64's baseline (SSE2) that can appear without a VEX/EVEX encoding (every VEX or EVEX one
# starts with "v" and is caught as such): SSE3, SSSE3, SSE4.1/4.2, POPCNT, LZCNT, BMI1/2, MOVBE. Not tzcnt: GCC's
# generic tuning emits `rep bsf` for a trailing-zero count, which objdump names tzcnt and an older processor runs
# as bsf (the compiler only uses it where both agree).
ABOVE_SSE2 = set("""addsubps addsubpd haddps haddpd hsubps hsubpd lddqu movddup movshdup movsldup pabsb pabsw pabsd
palignr phaddw phaddd phaddsw phsubw phsubd phsubsw pmaddubsw pmulhrsw pshufb psignb psignw psignd blendpd blendps
blendvpd blendvps dppd dpps extractps insertps movntdqa mpsadbw packusdw pblendvb pblendw pcmpeqq pextrb pextrd
pextrq phminposuw pinsrb pinsrd pinsrq pmaxsb pmaxsd pmaxud pmaxuw pminsb pminsd pminud pminuw pmovsxbw pmovsxbd
pmovsxbq pmovsxwd pmovsxwq pmovsxdq pmovzxbw pmovzxbd pmovzxbq pmovzxwd pmovzxwq pmovzxdq pmuldq pmulld ptest
roundps roundpd roundss roundsd pcmpestri pcmpestrm pcmpistri pcmpistrm pcmpgtq crc32 popcnt lzcnt andn bextr blsi
blsmsk blsr bzhi mulx pdep pext rorx sarx shlx shrx movbe""".split())
# AVX-512 only (above x86-64-v3): its registers, masks, and the EVEX-only operations on xmm/ymm registers.
AVX512_OPERAND = re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{")
AVX512_MNEMONIC = re.compile(r"^v(pternlog|perm[it]2|pmov[dqw][bwd]|pmovus|pmovs[dqw]|pro[lr]|pabsq|pmaxsq|pmaxuq|"
                             r"pminsq|pminuq|psraq|rndscale|rcp14|rsqrt14|cvt\w*u[dq]q|cvtu|cvt\w*2u|fpclass|getexp|"
                             r"getmant|range|reduce|scalef|compress|expand|pconflict|plzcnt|pcmpu?[bwdq]$|"
                             r"(extract|insert|broadcast|shuf)[if](32|64)x|align[dq]|pmullq|cvt[qu]q|cvtt?p[sd]2u?qq|"
                             r"dbpsadbw|pbroadcastm|pmadd52|movdqu(8|16|32|64)|movdqa(32|64))")
LEVEL = {"baseline": 0, "avx2": 1, "avx512": 2}
# Compiled for the baseline in every variant (slotopt_kernels.c, BASELINE_): the loader calls them first.
ASKED_FIRST = {"slotopt_cpu_supported", "slotopt_abi_version", "slotopt_isa"}


def level_of(mnemonic: str, operands: str) -> int:
    """0: x86-64 baseline; 1: above it, within x86-64-v3 (AVX2, FMA, BMI); 2: AVX-512."""
    if AVX512_OPERAND.search(operands) or AVX512_MNEMONIC.match(mnemonic):
        return 2
    if (mnemonic.startswith("v") and mnemonic not in ("verr", "verw")) or mnemonic in ABOVE_SSE2 or "%ymm" in operands:
        return 1
    return 0


def functions(path: str) -> dict[str, int]:
    """Each function of the library -> the highest instruction level in it (objdump -d)."""
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                             check=True).stdout
    levels: dict[str, int] = {}
    name = None
    for line in listing.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if header:
            name = header.group(1)
            levels.setdefault(name, 0)
            continue
        instruction = re.match(r"^\s+[0-9a-f]+:\s+(\S+)\s*(.*)$", line)
        if instruction and name is not None:
            mnemonic, operands = instruction.groups()
            if mnemonic in ("rep", "repz", "repnz", "lock", "notrack", "bnd", "data16", "cs", "ds"):
                mnemonic, _, operands = operands.partition(" ")
            levels[name] = max(levels[name], level_of(mnemonic, operands))
    return levels


def exported(path: str) -> set[str]:
    listing = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.strip()}


needs_objdump = pytest.mark.skipif(not (X86_64 and shutil.which("objdump") and shutil.which("nm")),
                                   reason="x86-64 with binutils (objdump, nm) only")


def test_the_checker_sees_each_level():
    assert level_of("addps", "%xmm1,%xmm0") == 0
    assert level_of("pmulld", "%xmm1,%xmm0") == 1
    assert level_of("vaddps", "%ymm1,%ymm2,%ymm0") == 1
    assert level_of("vaddps", "%xmm17,%xmm2,%xmm0") == 2
    assert level_of("vaddps", "%zmm1,%zmm2,%zmm0") == 2
    assert level_of("vpternlogd", "$0xff,%ymm1,%ymm2,%ymm0") == 2
    assert level_of("vmovups", "(%rax),%ymm0{%k1}{z}") == 2


@needs_objdump
@pytest.mark.skipif("baseline" not in BUILT, reason="the compiled kernels are not built")
def test_the_baseline_library_has_no_instruction_above_sse2():
    above = {name: level for name, level in functions(BUILT["baseline"]).items() if level}
    assert above == {}


@needs_objdump
@pytest.mark.parametrize("variant", ["avx2", "avx512"])
def test_a_variant_runs_only_baseline_code_before_its_processor_check(variant):
    """Everything outside the dispatched code (slotopt_kernels.c's rules and helpers, which run only once the
    variant is chosen) is baseline: the questions the loader asks, and the start-up code (libgcc's CPU probe)."""
    if variant not in BUILT:
        pytest.skip(f"the {variant} variant is not built (a compiler without its level)")
    path = BUILT[variant]
    ours = exported(path) - ASKED_FIRST
    levels = functions(path)
    dispatched = {name for name in levels if name.split(".")[0] in ours or name.split(".")[0].endswith("_")}
    assert ASKED_FIRST <= set(levels) and dispatched
    assert {name: level for name, level in levels.items() if name not in dispatched and level} == {}
    assert max(levels[name] for name in dispatched) <= LEVEL[variant]
    assert max(levels[name] for name in dispatched) >= 1  # the variant really uses its instruction set


# Every rule family on every dtype, including TensorFlow's float32 packet rsqrt (v1 Adagrad, on tensors of whole
# 8-float packets and a remainder) and the loss-scale unscale; one JSON line of digests per variant.
_BATTERY = r"""
import hashlib, json
import numpy as np
import torch
import slotopt
from slotopt.kernels import native
from slotopt.kernels.native import variants

assert native.status()["variant"] == __import__("os").environ["SLOTOPT_KERNELS_ISA"], native.status()
torch.set_num_threads(2)
out = {}
configs = [("Adam", {"amsgrad": True}), ("AdamW", {"weight_decay": 0.01}), ("Adagrad", {}), ("RMSprop", {"momentum": 0.9}),
           ("SGD", {"momentum": 0.9, "nesterov": True}), ("Adadelta", {}), ("Adamax", {}), ("Nadam", {}),
           ("Ftrl", {}), ("Lion", {}), ("Adafactor", {})]
for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
    for name, config in configs:
        rng = np.random.RandomState(7)
        params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(dtype))
                  for s in [(3,), (17, 5), (40000,)]]
        opt = slotopt.get({"class_name": name, "config": {"learning_rate": 0.01, **config}})
        opt.build(params)
        for _ in range(3):
            for p in params:
                p.grad = torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32)).to(dtype)
            opt.step()
        out[f"{name}/{dtype}"] = hashlib.sha256(b"".join(p.detach().view(torch.uint8).numpy().tobytes()
                                                          for p in params)).hexdigest()
for name in ("Adagrad", "Adadelta", "ProximalAdagrad"):
    rng = np.random.RandomState(3)
    params = [torch.nn.Parameter(torch.from_numpy(rng.random_sample(s).astype(np.float32))) for s in [(19,), (40003,)]]
    opt = getattr(slotopt.v1, name + "Optimizer")(0.1)
    for _ in range(3):
        opt.apply_gradients([(torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32)), p)
                             for p in params])
    out["v1/" + name] = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in params)).hexdigest()
print(json.dumps({"calls": native.calls(), **out}))
"""


@pytest.mark.skipif(len(BUILT) < 2, reason="one variant of the compiled kernels built (or none)")
def test_every_variant_computes_the_same_bits():
    runnable = [name for name, path in BUILT.items() if ctypes.CDLL(path).slotopt_cpu_supported()]
    if len(runnable) < 2:
        pytest.skip("this processor runs only one variant")
    results = {}
    for variant in runnable:
        run = subprocess.run([sys.executable, "-c", _BATTERY], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "SLOTOPT_KERNELS_ISA": variant, "SLOTOPT_KERNELS": "native"})
        assert run.returncode == 0, run.stderr[-2000:]
        results[variant] = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(result["calls"] > 50 for result in results.values())
    reference = results.pop("baseline")
    for variant, result in results.items():
        assert result == reference, variant


def test_the_loader_tries_the_best_variant_first_or_the_one_named(monkeypatch):
    monkeypatch.delenv("SLOTOPT_KERNELS_ISA", raising=False)
    assert [name for name, _ in variants.candidates(os.path.dirname(native.__file__))] == ["avx512", "avx2", "baseline"]
    monkeypatch.setenv("SLOTOPT_KERNELS_ISA", "avx2")
    assert variants.candidates(os.path.dirname(native.__file__)) == [("avx2", LIBRARIES["avx2"])]
    monkeypatch.setenv("SLOTOPT_KERNELS_ISA", "sse9")
    assert variants.candidates(os.path.dirname(native.__file__)) == []


@pytest.mark.skipif("baseline" not in BUILT, reason="the compiled kernels are not built")
def test_status_names_the_variant_loaded():
    state = native.status()
    if state["path"] == "native":
        assert state["variant"] in BUILT and state["library"] == BUILT[state["variant"]]
        assert f"({state['variant']} variant" in state["reason"]
