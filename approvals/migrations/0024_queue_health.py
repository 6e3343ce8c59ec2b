# Queue health: the hourly rollup of the audit log (approvals/models/health.py) and when each decided
# call was parked (AuditEntry.parked_at: time to decision).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0023_notifications"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="parked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="HealthWatermark",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("last_id", models.BigIntegerField(default=0)),
                ("folded_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "db_table": "approvals_health_watermark",
            },
        ),
        migrations.CreateModel(
            name="HealthCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "series",
                    models.CharField(
                        choices=[
                            ("parked", "parked"),
                            ("decided", "decided"),
                            ("wait", "wait"),
                            ("reviewer", "reviewer"),
                            ("grant", "grant"),
                        ],
                        max_length=12,
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("agent_id", models.CharField(max_length=255)),
                ("tool_name", models.CharField(blank=True, max_length=255)),
                ("label", models.CharField(blank=True, max_length=255)),
                ("count", models.BigIntegerField(default=0)),
                ("seconds", models.FloatField(default=0.0)),
            ],
            options={
                "db_table": "approvals_health_count",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("series", "hour", "agent_id", "tool_name", "label"), name="health_count_key"
                    )
                ],
            },
        ),
    ]
