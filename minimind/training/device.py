"""Where training runs: CUDA, then Apple MPS, then the CPU (the book's cells too)."""
import torch


def pick_device(prefer: str | None = None) -> torch.device:
    """The best available device, or `prefer` (cuda, mps, cpu); ValueError if absent."""
    if prefer:
        return available(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if has_mps():
        return torch.device("mps")
    return torch.device("cpu")


def has_mps() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def available(name: str) -> torch.device:
    """torch.device(name); ValueError if torch does not know it or it is not here."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"{name!r} is not a device torch knows; use cuda, mps "
                         "or cpu") from None
    present = {"cuda": torch.cuda.is_available, "mps": has_mps}
    if not present.get(device.type, lambda: True)():
        raise ValueError(f"{name!r} is not available on this machine; use cpu, or "
                         "leave it out for the best available")
    return device


def pick_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 where the hardware runs it fast (recent CUDA GPUs), else float32."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32
