"""`python -m bench tokenize`: what tokenizer-exact prompt ids cost the gateway per request.

A byte-level BPE tokenizer (at most `--vocab` ids; this repository's text gives ~13k) is
trained on the repository's text, with a ChatML chat template (the emulator's); chat prompts
of about 1k and 8k tokens (plus a sweep of sizes for the thread-offload threshold) are cut
from the same text. Measured per call:

- `local` (`gateway.tokens.local.LocalTokenizer`): template render + encode on the event
  loop (`inline`) and in a worker thread (`thread`), on fresh text each call and on one
  repeated prompt (`tokenizers` caches words), with the longest event-loop stall seen by a
  heartbeat task meanwhile;
- `engine` (`gateway.tokens.engine.EngineTokenizer`) against `kvgate emulate --tokenizer`
  in a child process: `cold` (every prompt new: a /tokenize round trip) and `warm` (cache
  hits), over the gateway's own HTTP client and over httpx.

The emulator tokenizes with the same `tokenizers` library, so the engine's round trip here
is a lower bound of a real vLLM's (which also queues /tokenize behind its API server).
"""
