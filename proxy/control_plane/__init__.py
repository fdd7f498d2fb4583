"""The quota control plane: DescribeClientQuotas/AlterClientQuotas answered and applied, the quota store on
its topic, file reloads, the idle-sensor sweep and the broker shield's ticks."""
