"""Admission control under a burst: shed fraction, admitted TTFT against unloaded, and each
tenant's share against its fair share (`python -m bench admission`)."""
