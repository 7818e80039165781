"""kvgate's command line: the composition root, the only code importing both gateway and sim."""
