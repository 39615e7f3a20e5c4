"""Operations commands (``python -m shared.ops``): tools for the people who run Inferbus."""
