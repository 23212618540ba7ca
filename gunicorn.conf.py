"""gunicorn's settings for ldpmarket, read from the working directory (the image's /app, docker compose, E4).

Django's ``DJANGO_SECURE_PROXY_SSL_HEADER`` is the one switch that makes a proxy's ``X-Forwarded-Proto``
believed (docs/security.md#deployment-https-and-headers).  gunicorn's own defaults would also believe it, from
127.0.0.1 and ::1 (and from any peer on a unix socket), and mark the request https before Django sees it, so
a client on the same host could claim https.  Here gunicorn believes no forwarded header from anyone.
"""
forwarded_allow_ips = ""
secure_scheme_headers: dict[str, str] = {}
