"""Operations of the HAL: one module per family, declared as data (see base.py)."""
