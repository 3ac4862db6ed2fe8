"""Every route the engine owns, as one router for the app to include."""

from fastapi import APIRouter

from backend.api import catalog, cluster_artifacts, cluster_nodes, cluster_workload

router = APIRouter()
router.include_router(catalog.router)
router.include_router(cluster_artifacts.router)
router.include_router(cluster_nodes.router)
router.include_router(cluster_workload.router)
