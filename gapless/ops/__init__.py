"""Operations: what an operator runs against a live system (audit, the chain, checkpoints).

The CLI only parses arguments and renders what these return.
"""
