"""``GET /api/v1/teams`` and ``/api/v1/templates`` for older clients: served only while
``SIGNOFF_COMPAT_LEGACY_CLIENTS`` is on (app.py), and left out of the OpenAPI document,
which describes the interface itself.

signoff has neither teams nor templates; clients written for services that do fill a
dropdown from these at start-up and stop at a 404. An empty list lets them go on.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_response, require_scope
from signoff.common.routing import LeanRoute

router = APIRouter(prefix="/api/v1", include_in_schema=False, route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]


@router.get("/teams")
async def list_teams(principal: Reader) -> Response:
    return json_response({"data": []})


@router.get("/templates")
async def list_templates(principal: Reader) -> Response:
    return json_response({"data": []})
