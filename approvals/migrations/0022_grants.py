# Standing grants (filled by the grants change)

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0021_outcomes_of_deadlines_and_votes"),
    ]

    operations = []
