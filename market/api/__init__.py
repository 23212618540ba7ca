"""The buyer REST API under /api/v1/ (spec service.md section 4): serializers, views and routes."""
