"""The FastAPI application: gates, error mapping, health, and the routers."""
from __future__ import annotations

import shutil
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from .. import __version__
from ..bootstrap import Runtime, build_runtime
from ..errors import CaoError
from ..settings import Settings
from .events_stream import router as events_router
from .routes import router
from .security import RequestGate, cors_origins
from .workflow_routes import router as workflow_router


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.runtime = runtime or build_runtime(settings)
        await app.state.runtime.start()
        try:
            yield
        finally:
            await app.state.runtime.stop()

    app = FastAPI(title="cao", version=__version__, lifespan=lifespan,
                  description="cao-server: run coding-agent CLIs in tmux and orchestrate them.")

    @app.exception_handler(CaoError)
    async def cao_error(_request: Request, exc: CaoError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail()}, status_code=exc.http_status)

    @app.get("/health")
    async def health(request: Request) -> dict:
        runtime: Runtime = request.app.state.runtime
        return {"status": "ok", "service": "cli-agent-orchestrator", "version": __version__,
                "terminal_backend": runtime.backend.name,
                "home_dir": str(runtime.settings.home_dir),
                "tmux_socket": runtime.settings.tmux_socket_name,
                "components": {"cao": "ok", "tmux": "ok" if shutil.which("tmux") else "unavailable"}}

    @app.get("/diagnostics")
    async def diagnostics(request: Request) -> dict:
        """Event-bus queues, drops and consumer failures: nothing fails silently."""
        runtime: Runtime = request.app.state.runtime
        return {"subscribers": runtime.bus.stats(),
                "consumer_failures": [f.__dict__ for f in runtime.bus.failures]}

    app.include_router(router)
    app.include_router(workflow_router)
    app.include_router(events_router)
    app.add_middleware(CORSMiddleware, allow_origins=cors_origins(settings), allow_credentials=True,
                       allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(RequestGate, settings=settings)
    return app
