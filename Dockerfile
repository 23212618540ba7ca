# The ldpmarket image: one image for web (gunicorn), worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=ldpmarket.settings

WORKDIR /app

# Dependencies first, so code changes do not reinstall them (every runtime dependency ships wheels).
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .

# The Python client (ldpmarket_client, client/): the service signs and checks its checkpoints with its C2SP formats
# (ldpmarket_client.tlog, docs/receipts.md#checkpoints-as-signed-notes), and load_demo draws the owner-held demo
# values' chains with the owner SDK's sampler, the code an owner's device runs (docs/custody.md).
RUN pip install ./client

# Static files for whitenoise. collectstatic needs settings to load but touches no database and no key
# material: DJANGO_DEBUG=1 for this one command lets the settings use their development keys (weak keys
# refuse start-up without it). The services run with DJANGO_DEBUG=0 and the real keys from the environment.
RUN DJANGO_DEBUG=1 python manage.py collectstatic --noinput -v0

RUN useradd --create-home --uid 10001 ldpmarket
USER ldpmarket

EXPOSE 8000
CMD ["gunicorn", "ldpmarket.wsgi:application", "--bind", "0.0.0.0:8000", "--access-logfile", "-"]
