"""What routers report (SPEC §6 RouterService): the rollout board and rejection totals. Pure.

A leaf: the servicer (``server.router_service``) feeds reports in, the router-stats tables of
``store/`` persist the records and rows defined here.
"""
