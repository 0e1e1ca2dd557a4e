"""The page: `/` (and `/login`, where a one-time link lands) answer the built index.html, and
`/assets/` its script and styles, all from the package (no Node.js at run time). Mounted after
every API route, so an API path always wins.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

ASSETS = Path(__file__).parent / "assets"
# The page runs only its own script and talks only to its own server; no other site may
# frame it (clickjacking), and it sends no Referer anywhere.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; font-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _Assets(StaticFiles):
    async def get_response(self, path: str, scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount_page(app: FastAPI, assets: Path = ASSETS) -> None:
    index = assets / "index.html"

    async def page() -> Response:
        if not index.is_file():
            return JSONResponse(
                {"detail": "the web UI is not built in this installation: run scripts/build-ui.sh"}, status_code=503
            )
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    app.add_api_route("/", page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/login", page, methods=["GET"], include_in_schema=False)
    app.mount("/assets", _Assets(directory=assets, check_dir=False), name="assets")
