"""Router status and rejection statistics (SPEC §6 RouterService): pure aggregation and views."""
