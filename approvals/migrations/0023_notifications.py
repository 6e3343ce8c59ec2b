# Notifications (filled by the notifications change)

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0022_grants"),
    ]

    operations = []
