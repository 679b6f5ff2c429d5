"""The request path's byte mechanics, shared by the local gateway, the payload processor and `maasctl simulate`.

Reading and preparing a request body, routing on its `model`, decompressing and scanning answers for `usage`,
rewriting a renamed model's name, what a request reserves and is charged, and API translation. Pure (no I/O), so
every front runs the same code. The contract keeps what other processes share (the usage record and its bounds,
the routing constants the builders render); the builders, maas-api and billing never import this package.

- `body`: the request body the backend receives (`prepare_body`, `bound_completion`) and the one JSON object
  reader;
- `routing`: body-based routing on one base URL (the body's `model` into the route's header);
- `decompress`: an answer's Content-Encoding undone for scanning;
- `sse`: the usage (and model rename) of an event stream;
- `jsonscan`: the usage (and model rename) of a JSON answer;
- `charge`: what a request reserves (`request_bound`) and the tokens it is charged once finished;
- `lenient`: numbers read the way a lax backend reads them;
- `translate`: OpenAI Chat <-> Anthropic Messages.

Import from the module that owns a name.
"""
