"""Pick where the book's cells run: CUDA, then Apple MPS, then the CPU."""
import torch


def pick_device(prefer: str | None = None) -> torch.device:
    """The best available device, or `prefer` ("cuda", "mps", "cpu") if given."""
    if prefer:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 where the hardware runs it fast (recent CUDA GPUs), else float32 (CPUs: bf16 is slower there)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32
