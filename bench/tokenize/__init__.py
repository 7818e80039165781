"""`python -m bench tokenize`: what tokenizer-exact prompt ids cost the gateway per request.

A byte-level BPE tokenizer (at most `--vocab` ids; ~13k from this repository) is trained on
the repository's text, with a ChatML chat template (the emulator's); chat prompts of about 1k
and 8k tokens (and a sweep of sizes for the thread-offload threshold) are cut from the same
text. Measured per call:

- `local` (`gateway.tokens.local.LocalTokenizer`): template render + encode on the event loop
  (`inline`) and in a worker thread (`thread`), on fresh text and on one repeated prompt
  (`tokenizers` caches words), with the longest event-loop stall a heartbeat task saw;
- `engine` (`gateway.tokens.engine.EngineTokenizer`) against `kvgate emulate --tokenizer` in a
  child process: `cold` (a /tokenize round trip each) and `warm` (cache hits), over the
  gateway's own HTTP client and over httpx. The emulator tokenizes with the same library, so
  this is a lower bound of a real vLLM's round trip (which also queues behind its API server).
"""
