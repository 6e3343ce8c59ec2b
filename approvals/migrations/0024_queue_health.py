# Queue health (filled by the queue-health change)

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0023_notifications"),
    ]

    operations = []
