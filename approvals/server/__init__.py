"""The fence: our replacements of framework parts, kept only because they are faster here, or because
the part misbehaves here.

Each module replaces a part of Django, Channels, psycopg, Twisted or WhiteNoise that costs too much
in this app's hot paths (or gets something wrong), and says in its docstring what it replaces, why
(the bench that measured it, in ``docs/scaling.md``, or what went wrong), and when to delete it (the
upstream change that makes it unnecessary). Nothing else lives here: the app's own behaviour is
elsewhere.

- ``database``: database access from the async server: one database thread per request for async
  code and every connection given back (replaces asgiref's per-call thread hops and Django's
  request-end cleanup under ASGI); psycopg's pool, failing a request within
  ``DATABASE_UNREACHABLE_SECONDS`` when the server cannot be reached, and its figures in the log
  (psycopg's pool reports nothing by itself); the run store's fixed statements prepared once per
  connection (Django prepares none). ``postgresql``: Django's backend building that pool.
- ``loop_middleware``: Django's built-in middlewares with their hooks on the event loop.
- ``layers``: Channels' in-process layer without its O(N) work per message.
- ``static_files``: WhiteNoise as ASGI middleware, before Django (its Django middleware is sync-only).
- ``reason_phrases``: the reason phrases Twisted's table lacks (429), for Daphne's status lines.
- ``daphne_requests``: Daphne's requests, bounded: POST bodies left to Django (not parsed by Twisted
  on the event loop) and refused over ``DATA_UPLOAD_MAX_MEMORY_SIZE``, pipelined answers held while
  the client leaves them unread.
- ``widgets``: Django's form renderer with its plain inputs and selects written without templates.
"""
