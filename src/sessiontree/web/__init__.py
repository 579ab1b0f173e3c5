"""`sessiontree serve`: a local, read-only web app over a session store.

Starlette under uvicorn (the optional `web` extra), pages from the Jinja2 templates
that `export --format html` uses too. `app.create_app` builds the app; `server.serve`
runs it; `data` is where listings, search and usage come from; `sessions` opens
sessions and follows appends; `security` guards every request.
"""
