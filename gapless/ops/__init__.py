"""Operations: what an operator runs against a live system — the audit, the chain and its
checkpoints, the status snapshot, doctor's checks, the dead letters — and how a service that
cannot be reached is named (unreachable).

The CLI only parses arguments and renders what these return.
"""
