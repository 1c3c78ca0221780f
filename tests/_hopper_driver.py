"""A stand-in for Triton's CUDA driver of a Hopper GPU, for the CPU: what a launch through Triton's own
``JITFunction.run`` asks the driver for (the current device and stream, the target, the device's properties,
loading the compiled binary) answered without a device, and a launcher (``Launcher``, in place of Triton's
``CudaLauncher``) that records each call, the call that would go to the device, instead of launching.

Used by ``tests/kernels/test_triton_launcher.py`` (the prepared launch's call against the normal route's) and
``benchmarks/launch_overhead.py`` (the host's Python per launch both ways). Install it with
``triton.runtime.driver.driver.set_active(HopperWithoutADevice())``; ``set_active(None)`` gives the real driver
back (made when next asked for).
"""

from __future__ import annotations

from typing import Any

#: The stream and function handle the stand-in reports (any numbers: nothing is launched).
STREAM, FUNCTION = 0x5EED, 0x7E57


def hopper_backend() -> Any:
    """Triton's CUDA backend for a Hopper target (sm_90), made without a device."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    return make_backend(GPUTarget("cuda", 90, 32))


class Launcher:
    """Stands in for ``CudaLauncher``: records each call (what would go to the device) instead of launching
    (``record = False``: records nothing, for timing the host's side), and calls the enter hook on the launch
    metadata as Triton's C launcher does."""

    calls: list[tuple[Any, ...]] = []
    record = True

    def __init__(self, src: Any, metadata: Any) -> None:
        self.metadata = metadata

    def __call__(self, *call: Any) -> None:
        if Launcher.record:
            Launcher.calls.append(call)
        if call[7] is not None:
            call[7](call[6])


class _Utils:
    def get_device_properties(self, device: int) -> dict[str, int]:
        return {"max_shared_mem": 232448, "multiprocessor_count": 132}

    def __init__(self, loaded: bool) -> None:
        self.module = "module" if loaded else None

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple[Any, ...]:
        # the module, function handle, registers, spills, and (the Triton versions whose CompiledKernel asks for
        # it) the most threads per block
        import inspect

        from triton.compiler import CompiledKernel

        wanted = "n_max_threads" in inspect.getsource(CompiledKernel._init_handles)
        return (self.module, FUNCTION, 32, 0, 1024) if wanted else (self.module, FUNCTION, 32, 0)

    def unload_module(self, module: Any) -> None:
        pass


class HopperWithoutADevice:
    """The part of Triton's GPU driver that a launch through ``JITFunction.run`` uses, for a Hopper target."""

    launcher_cls = Launcher

    def __init__(self, loaded: bool = False) -> None:
        # loaded=False: the module is None, so Triton never unloads one (a kernel freed after the real driver is
        # back), and it makes its handles again at each launch through its route (the tests: the same calls);
        # loaded=True: a module, as on a device, so Triton makes them once (benchmarks: the route's real cost;
        # keep the stand-in active until the process ends)
        self.utils = _Utils(loaded)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return STREAM

    def get_current_target(self) -> Any:
        return hopper_backend().target

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return (9, 0)
