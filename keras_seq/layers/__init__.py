"""Public layers of keras-seq (see API.md for the contract)."""

# --- recurrent family ---

# --- attention, position and Transformer blocks ---

__all__ = [name for name in dir() if not name.startswith("_")]
