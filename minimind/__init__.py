"""MiniMind Annotated: the real MiniMind model, one module per concept of the book.

The model core lives here (config -> norm -> rope -> attention -> feed_forward -> moe -> block -> model -> loss
-> sampling -> generate, plus checkpoint and export). Book helpers are in minimind.lab, training in
minimind.training; the core imports neither.
"""
from .config import MiniMindConfig
from .model import MiniMindForCausalLM, MiniMindModel
from .checkpoint import load_pretrained, load_tokenizer

__all__ = ["MiniMindConfig", "MiniMindForCausalLM", "MiniMindModel", "load_pretrained", "load_tokenizer"]
