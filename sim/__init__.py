"""Simulation: the engine model (pure, `sim.engine`), the HTTP emulator (`sim.emulator`),
and, later, the offline trace replayer. `sim.engine` imports no web library."""
