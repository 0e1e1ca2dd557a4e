"""The FastAPI application: gates, error mapping, health, and the routers."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from starlette.routing import Route

from .. import __version__
from ..auth_token import ensure_token
from ..bootstrap import Runtime, build_runtime
from ..mcp_server.endpoint import PATH as MCP_PATH
from ..mcp_server.endpoint import McpEndpoint
from ..settings import Settings
from ..web.logins import Logins
from ..web.static import mount_page
from .actor_middleware import ActorMiddleware
from .auth import OwnerOrToken
from .errors import EVERY_ROUTE, install_error_handlers
from .events_stream import router as events_router
from .flow_routes import router as flow_router
from .handoff_routes import router as handoff_router
from .hook_routes import router as hook_router
from .host_routes import router as host_router
from .inbox_routes import router as inbox_router
from .label_routes import router as label_router
from .limits import BodySizeLimit
from .memory_routes import router as memory_router
from .profile_routes import router as profile_router
from .routes import router
from .security import RequestGate, cors_origins
from .skill_routes import router as skill_router
from .step_routes import router as step_router
from .terminal_ws import router as terminal_ws_router
from .ui_routes import router as ui_router
from .workflow_routes import router as workflow_router

# /health asks the store and tmux now, both at once, each within this: it answers well under a
# second even while either hangs (a stopped tmux server, an unreachable PostgreSQL host).
HEALTH_PROBE_S = 0.5


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.runtime = runtime or build_runtime(settings)
        await app.state.runtime.start()
        await mcp.start()
        try:
            yield
        finally:
            await mcp.stop()  # first: a tool call in flight ends before the runtime under it
            await app.state.runtime.stop()

    app = FastAPI(
        title="cao",
        version=__version__,
        lifespan=lifespan,
        description="cao-server: run coding-agent CLIs in tmux and orchestrate them.",
    )

    install_error_handlers(app)
    app.state.logins = logins = Logins()  # browser sessions (web UI), in memory

    @app.get("/health", responses=EVERY_ROUTE)
    async def health(request: Request) -> dict:
        """`status` is "degraded", with `reason`, while the store or tmux cannot serve, and "ok"
        again after. `components.store`: "down" (a read fails, or the last write failed and none
        succeeded since: disk full, read-only, PostgreSQL down) or "not answering".
        `components.tmux`: "down" (its server was lost, with its agents; the next new terminal
        starts a new one), "not answering" (stopped or overloaded) or "unavailable" (not on PATH)."""
        runtime: Runtime = request.app.state.runtime
        store, backend = await asyncio.gather(
            runtime.store.probe(HEALTH_PROBE_S), runtime.backend.probe(HEALTH_PROBE_S)
        )
        tmux = "unavailable" if not shutil.which("tmux") else backend["status"]
        if tmux not in ("ok", "not answering", "unavailable"):
            tmux = "down"
        reasons = [part["reason"] for part in (store, backend) if part["status"] != "ok" and part.get("reason")]
        body = {
            "status": "ok" if tmux == "ok" and store["status"] == "ok" else "degraded",
            "service": "cli-agent-orchestrator",
            "version": __version__,
            "terminal_backend": runtime.backend.name,
            "home_dir": str(runtime.settings.home_dir),
            "tmux_socket": runtime.settings.tmux_socket_name,
            "database": runtime.store.where,  # never with its password
            "components": {"cao": "ok", "store": store["status"], "tmux": tmux},
            "pid": os.getpid(),
            # Who starts the server again if it dies: {"kind": "watchdog"|"systemd", ...} or null.
            "supervisor": getattr(request.app.state, "supervision", lambda: None)(),
        }
        if reasons:
            body["reason"] = "; ".join(reasons)
        return body

    @app.get("/diagnostics", responses=EVERY_ROUTE)
    async def diagnostics(request: Request) -> dict:
        """Event-bus queues, drops and consumer failures, and each enabled plugin's state and
        failures (or why it is not running): nothing fails silently."""
        runtime: Runtime = request.app.state.runtime
        return {
            "subscribers": runtime.bus.stats(),
            "consumer_failures": [f.__dict__ for f in runtime.bus.failures],
            "terminals": runtime.monitor.stats(),
            "plugins": runtime.plugins.stats(),
            # Connections held and refused per user, and request deadlines missed (api/connections.py).
            "connections": limits.stats() if (limits := getattr(request.app.state, "connections", None)) else None,
        }

    app.include_router(router)
    app.include_router(label_router)
    app.include_router(memory_router)
    app.include_router(skill_router)  # issue 29: skills
    app.include_router(inbox_router)
    app.include_router(hook_router)
    app.include_router(step_router)
    app.include_router(handoff_router)
    app.include_router(workflow_router)
    app.include_router(flow_router)
    app.include_router(host_router)
    app.include_router(events_router)
    app.include_router(profile_router)
    app.include_router(ui_router)
    app.include_router(terminal_ws_router)
    # cao's agent tools over MCP (streamable HTTP), behind the same gates as every route.
    mcp = McpEndpoint(
        settings,
        app,
        server_token=functools.cache(lambda: ensure_token(settings.auth_token_path)),
        store=lambda: app.state.runtime.store,
        bus=lambda: app.state.runtime.bus,
    )
    for path in (MCP_PATH, MCP_PATH + "/"):
        app.router.routes.append(Route(path, mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))
    mount_page(app)  # last: every API route wins over the page
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(ActorMiddleware)  # what a request causes is credited to its client
    app.add_middleware(
        CORSMiddleware,
        allow_origins=cors_origins(settings),
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    # A stranger is refused before any route or other gate sees the request...
    app.add_middleware(OwnerOrToken, settings=settings, logins=logins)
    # ...after the header-only checks: a foreign Host or Origin, and a WebSocket's peer and
    # Origin, are refused first (close 4003, then 4403, before 4401: the contract's order).
    app.add_middleware(RequestGate, settings=settings)
    return app
