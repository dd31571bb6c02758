"""``Examples:`` of every verb's help, as kubectl and flux print them.  ``{prog}`` is the
program as the user called it (``kubectl flux-plunger`` or ``flux plunger``)."""

from __future__ import annotations

import click

EXAMPLES: dict[str, str] = {
    "": """\
  # What is stuck, being recovered, fenced or suspended, in every namespace
  {prog} status -A

  # Recover the stuck HelmReleases of one namespace; see the plan first
  {prog} recover -n team-a --dry-run
  {prog} recover -n team-a""",
    "status": """\
  # Every HelmRelease of the current namespace that needs attention
  {prog} status

  # All namespaces, with the storage namespace and the reason of each state
  {prog} status -A -o wide

  # Follow changes as they happen
  {prog} status -n team-a --watch

  # Machine-readable (schema flux-plunger.cozystack.io/v1alpha1)
  {prog} status -A -o json""",
    "recover": """\
  # Print what would be done, sending nothing
  {prog} recover -n team-a --dry-run

  # Recover two releases by name
  {prog} recover -n team-a podinfo redis

  # Recover every stuck release of a shard, eight at a time
  {prog} recover -A -l sharding.fluxcd.io/key=shard1 --concurrency 8

  # Without list on Leases cluster-wide: look for the running controllers in flux-system
  {prog} recover -A -l sharding.fluxcd.io/key=shard1 --lease-namespace flux-system""",
    "resume-owned": """\
  # Lift the suspensions a crashed flux-plunger left, in every namespace (those a running
  # flux-plunger covers are its own, in flight: left to it, and the exit status is 1)
  {prog} resume-owned -A

  # Only show what would be lifted
  {prog} resume-owned -n team-a --dry-run""",
    "release-fence": """\
  # What uninstalling the controller runs: release every uninstall fence
  {prog} release-fence -A

  # First let helm-controller finish the uninstalls it can, for up to 2 minutes
  {prog} release-fence -A --wait-uninstall --timeout 2m

  # Stop the controller's Deployment first (what the chart's uninstall hook does)
  {prog} release-fence -A --stop-deployment flux-plunger/flux-plunger

  # Uninstalling one shard: only that shard's releases (the others' recoveries go on)
  {prog} release-fence -A -l sharding.fluxcd.io/key=shard1 --stop-deployment fp/fp-shard1""",
    "restore": """\
  # Put back a revision `recover --backup-dir ./backups` saved (first suspend the release)
  {prog} restore ./backups/team-a_podinfo_v00000003_20260102T030405123456Z.json

  # See what would be created, sending nothing
  {prog} restore ./backups/team-a_podinfo_v00000003_20260102T030405123456Z.json --dry-run""",
    "version": """\
  # The client version only (no cluster needed)
  {prog} version --client

  # Also the server's and helm-controller's versions, as JSON
  {prog} version -o json""",
    "serve": """\
  # The controller as the Deployment runs it
  {prog} serve --leader-elect --termination-grace-period=90 --shutdown-drain-timeout=65s

  # Locally against the current context, one namespace, no leader election
  {prog} serve -n team-a --no-leader-elect --metrics-bind-address 0

  # One helm-controller shard on its own Lease (the main instance: -l '!sharding.fluxcd.io/key')
  {prog} serve -l sharding.fluxcd.io/key=shard1 --leader-election-id $SHARD1_LEASE""",
}


def prog(ctx: click.Context) -> str:
    return ctx.find_root().info_name or "kubectl flux-plunger"


def format_examples(ctx: click.Context, formatter: click.HelpFormatter, key: str) -> None:
    text = EXAMPLES.get(key)
    if not text:
        return
    formatter.write_paragraph()
    formatter.write_text("Examples:")
    for line in text.format(prog=prog(ctx)).splitlines():
        formatter.write(f"{line}\n" if line else "\n")


class Command(click.Command):
    """A verb whose help ends with its ``Examples:``."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        format_examples(ctx, formatter, self.name or "")


class Group(click.Group):
    command_class = Command

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        format_examples(ctx, formatter, "")
