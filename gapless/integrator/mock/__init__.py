"""The mock integrator: a stand-in for the e-invoice integrator, and the test oracle for I1 and I7.

It speaks the mock integrator HTTP API (docs/mock.md) and accepts each (tenant, number)
once, keeping every accepted document in acceptance order; it fails on demand in every way the
real one does, each fault drawn from its own seeded random stream so a run can be replayed.
``state`` holds the ledger, recipients, GİB verdicts and faults (no HTTP), ``app`` the routes,
``server`` the uvicorn process (``gapless mock-integrator``). Faults, checks and refusals in
detail: docs/mock.md.
"""
