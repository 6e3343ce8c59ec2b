# Notifications (issue 35): who never chose gets a daily digest (the defaults, state only: a user with
# no preference row has no row to change); each call listed by its card's title; and the address the
# site was last reached at, for links when COUNTERSIGN_BASE_URL is not set (approvals/site.py).

import django.core.validators
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0038_previews"),
    ]

    operations = [
        migrations.CreateModel(
            name="ServedAddress",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("url", models.CharField(max_length=300)),
                ("seen_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.AddField(
            model_name="notificationcall",
            name="title",
            field=models.CharField(blank=True, max_length=300),
        ),
        migrations.AlterField(
            model_name="notificationpreference",
            name="digest_minutes",
            field=models.PositiveIntegerField(
                default=1440,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(1440),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="notificationpreference",
            name="mode",
            field=models.CharField(
                choices=[
                    ("each", "Each call (bursts collapse into one message)"),
                    ("digest", "A digest of what waited (daily, unless you choose how often below)"),
                    ("off", "Off"),
                ],
                default="digest",
                max_length=8,
            ),
        ),
    ]
