"""API tokens move from REST framework's clear-text ``authtoken_token`` to django-rest-knox's digests.

Each old token becomes a knox token with the same key (so clients keep working) stored as its digest, with
an expiry of ``LDP_TOKEN_TTL_HOURS`` from now; then the clear-text table is dropped, and REST framework's
``authtoken`` app is forgotten by the migration history (it is no longer installed).  Databases that never
had the table are left as they are.  Not reversible: the clear-text keys are gone.
"""
from django.conf import settings
from django.db import migrations
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

OLD_TABLE = "authtoken_token"


def tokens_to_digests(apps, schema_editor):
    from knox.crypto import hash_token
    from knox.settings import CONSTANTS

    connection = schema_editor.connection
    if OLD_TABLE in connection.introspection.table_names():
        AuthToken = apps.get_model("knox", "AuthToken")
        quote = schema_editor.quote_name
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {quote('key')}, {quote('user_id')} FROM {quote(OLD_TABLE)}")
            rows = cursor.fetchall()
        expiry = timezone.now() + settings.REST_KNOX["TOKEN_TTL"]
        AuthToken.objects.using(connection.alias).bulk_create([
            AuthToken(digest=hash_token(key), token_key=key[:CONSTANTS.TOKEN_KEY_LENGTH], user_id=user_id,
                      expiry=expiry)
            for key, user_id in rows])
        schema_editor.execute(f"DROP TABLE {quote(OLD_TABLE)}")
    MigrationRecorder(connection).migration_qs.filter(app="authtoken").delete()


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0007_drop_redundant_fk_indexes"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [
        migrations.RunPython(tokens_to_digests, migrations.RunPython.noop, elidable=True),
    ]
