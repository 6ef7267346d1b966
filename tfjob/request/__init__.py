"""The training request: its model (`model.py`), its fields and limits (`fields.py`), the
checks of single fields (`checks.py`), its fault-recovery fields (`recovery.py`) and the
one error a bad request gets (`errors.py`)."""
