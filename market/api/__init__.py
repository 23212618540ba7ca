"""The buyer REST API under /api/v1/ (docs/architecture.md#the-path-of-a-purchase): serializers, views and routes."""
