"""The fields ``nvidia-smi``'s selective queries accept: every one that ``nvidia-smi
--help-query-gpu`` and ``--help-query-compute-apps`` list (driver 610), with their aliases and
the unit each one's CSV header and values carry, so a script written against NVIDIA's tool
never meets "not a valid field" here for a field the real one answers.

One field a line: its name, its aliases, then ``[unit]`` when its values have one. An alias is
answered under the field's own name, as nvidia-smi does (``gpu_name`` gets the header
``name``). Standard library only.
"""

from __future__ import annotations

from typing import NamedTuple

_GPU = """
timestamp
driver_version
kmd_version
vgpu_driver_capability.heterogenous_multivGPU
count
name gpu_name
serial gpu_serial
uuid gpu_uuid
pci.bus_id gpu_bus_id
pci.domain
pci.bus
pci.device
pci.baseClass
pci.subClass
pci.device_id
pci.sub_device_id
vgpu_device_capability.fractional_multiVgpu
vgpu_device_capability.heterogeneous_timeSlice_profile
vgpu_device_capability.heterogeneous_timeSlice_sizes
vgpu_device_capability.homogeneous_placements
vgpu_device_capability.mig_timeSlicing
vgpu_device_capability.mig_timeSlicing_mode
pcie.link.gen.current
pcie.link.gen.gpucurrent
pcie.link.gen.max
pcie.link.gen.gpumax
pcie.link.gen.hostmax
pcie.link.width.current
pcie.link.width.max
index
display_mode
display_attached
display_active
persistence_mode
addressing_mode
accounting.mode
accounting.buffer_size
driver_model.current
driver_model.pending
vbios_version
inforom.img inforom.image
inforom.oem
inforom.ecc
inforom.pwr inforom.power
inforom.checksum_validation
gpu_recovery_action
gom.current gpu_operation_mode.current
gom.pending gpu_operation_mode.pending
fan.speed [%]
pstate
clocks_event_reasons.supported
clocks_event_reasons.active
clocks_event_reasons.gpu_idle
clocks_event_reasons.applications_clocks_setting
clocks_event_reasons.sw_power_cap
clocks_event_reasons.hw_slowdown
clocks_event_reasons.hw_thermal_slowdown
clocks_event_reasons.hw_power_brake_slowdown
clocks_event_reasons.sw_thermal_slowdown
clocks_event_reasons.sync_boost
clocks_event_reasons_counters.sw_power_cap [us]
clocks_event_reasons_counters.sync_boost [us]
clocks_event_reasons_counters.sw_thermal_slowdown [us]
clocks_event_reasons_counters.hw_thermal_slowdown [us]
clocks_event_reasons_counters.hw_power_brake_slowdown [us]
memory.total [MiB]
memory.reserved [MiB]
memory.used [MiB]
memory.free [MiB]
compute_mode
compute_cap
utilization.gpu [%]
utilization.memory [%]
utilization.encoder [%]
utilization.decoder [%]
utilization.jpeg [%]
utilization.ofa [%]
encoder.stats.sessionCount
encoder.stats.averageFps
encoder.stats.averageLatency
dramEncryption.mode.current
dramEncryption.mode.pending
ecc.mode.current
ecc.mode.pending
ecc.errors.corrected.volatile.device_memory
ecc.errors.corrected.volatile.dram
ecc.errors.corrected.volatile.register_file
ecc.errors.corrected.volatile.l1_cache
ecc.errors.corrected.volatile.l2_cache
ecc.errors.corrected.volatile.texture_memory
ecc.errors.corrected.volatile.cbu
ecc.errors.corrected.volatile.sram
ecc.errors.corrected.volatile.total
ecc.errors.corrected.aggregate.device_memory
ecc.errors.corrected.aggregate.dram
ecc.errors.corrected.aggregate.register_file
ecc.errors.corrected.aggregate.l1_cache
ecc.errors.corrected.aggregate.l2_cache
ecc.errors.corrected.aggregate.texture_memory
ecc.errors.corrected.aggregate.cbu
ecc.errors.corrected.aggregate.sram
ecc.errors.corrected.aggregate.total
ecc.errors.uncorrected.volatile.device_memory
ecc.errors.uncorrected.volatile.dram
ecc.errors.uncorrected.volatile.register_file
ecc.errors.uncorrected.volatile.l1_cache
ecc.errors.uncorrected.volatile.l2_cache
ecc.errors.uncorrected.volatile.texture_memory
ecc.errors.uncorrected.volatile.cbu
ecc.errors.uncorrected.volatile.sram
ecc.errors.uncorrected.volatile.total
ecc.errors.uncorrected.aggregate.device_memory
ecc.errors.uncorrected.aggregate.dram
ecc.errors.uncorrected.aggregate.register_file
ecc.errors.uncorrected.aggregate.l1_cache
ecc.errors.uncorrected.aggregate.l2_cache
ecc.errors.uncorrected.aggregate.texture_memory
ecc.errors.uncorrected.aggregate.cbu
ecc.errors.uncorrected.aggregate.sram
ecc.errors.uncorrected.aggregate.total
ecc.errors.uncorrected.volatile.sram.parity
ecc.errors.uncorrected.volatile.sram.secded
ecc.errors.uncorrected.aggregate.sram.parity
ecc.errors.uncorrected.aggregate.sram.secded
ecc.errors.uncorrected.aggregate.sram.thresholdExceeded
ecc.errors.uncorrected.aggregate.sram.l2
ecc.errors.uncorrected.aggregate.sram.sm
ecc.errors.uncorrected.aggregate.sram.mcu
ecc.errors.uncorrected.aggregate.sram.pcie
ecc.errors.uncorrected.aggregate.sram.other
retired_pages.single_bit_ecc.count retired_pages.sbe
retired_pages.double_bit.count retired_pages.dbe
retired_pages.pending
remapped_rows.correctable remapped_rows.sbe
remapped_rows.correctable_inactive
remapped_rows.uncorrectable remapped_rows.dbe
remapped_rows.uncorrectable_inactive
remapped_rows.pending
remapped_rows.failure
remapped_rows.histogram.max
remapped_rows.histogram.high
remapped_rows.histogram.partial
remapped_rows.histogram.low
remapped_rows.histogram.none
temperature.gpu
temperature.gpu.tlimit
temperature.memory
power.management
power.draw [W]
power.draw.average gpu.power.draw.average [W]
power.draw.instant gpu.power.draw.instant [W]
power.limit gpu.power.requested_limit [W]
enforced.power.limit gpu.power.current_limit [W]
power.default_limit gpu.power.default_limit [W]
power.min_limit gpu.power.min_limit [W]
power.max_limit gpu.power.max_limit [W]
module.power.draw.average [W]
module.power.draw.instant [W]
module.power.limit module.power.requested_limit [W]
module.enforced.power.limit module.power.current_limit [W]
module.power.default_limit [W]
module.power.min_limit [W]
module.power.max_limit [W]
gpu.base.current [W]
gpu.base.requested [W]
gpu.base.default [W]
gpu.base.min [W]
gpu.base.max [W]
power_smoothing.tmp_floor [W]
power_smoothing.tmp_ceil [W]
power_smoothing.hw_lifetime_remaining_percent [%]
power_smoothing.enabled
power_smoothing.delayed_power_smoothing_supported
power_smoothing.soc_power_smoothing_enabled
power_smoothing.priv_level
power_smoothing.imm_ramp_down
power_smoothing.max_percent_tmp_floor [%]
power_smoothing.min_percent_tmp_floor [%]
power_smoothing.primary_power_floor [W]
power_smoothing.secondary_power_floor [W]
power_smoothing.min_primary_floor_activation_offset [W]
power_smoothing.min_primary_floor_activation_point [W]
power_smoothing.window_multiplier [ms]
power_smoothing.num_preset_profiles
power_smoothing.curr_profile.percent_tmp_floor [%]
power_smoothing.curr_profile.ramp_up_rate [W/s]
power_smoothing.curr_profile.ramp_down_rate [W/s]
power_smoothing.curr_profile.ramp_down_hysteresis [ms]
power_smoothing.curr_profile.secondary_power_floor [W]
power_smoothing.curr_profile.primary_floor_act_window_multiplier
power_smoothing.curr_profile.primary_floor_tar_window_multiplier
power_smoothing.curr_profile.primary_floor_act_offset [W]
power_smoothing.active_profile
power_smoothing.admin_override.percent_tmp_floor [%]
power_smoothing.admin_override.ramp_up_rate [W/s]
power_smoothing.admin_override.ramp_down_rate [W/s]
power_smoothing.admin_override.ramp_down_hysteresis [ms]
power_smoothing.admin_override.secondary_power_floor [W]
power_smoothing.admin_override.primary_floor_act_window_multiplier
power_smoothing.admin_override.primary_floor_tar_window_multiplier
power_smoothing.admin_override.primary_floor_act_offset [W]
edpp_multiplier [%]
clocks.current.graphics clocks.gr [MHz]
clocks.current.sm clocks.sm [MHz]
clocks.current.memory clocks.mem [MHz]
clocks.current.video clocks.video [MHz]
clocks.applications.graphics clocks.applications.gr [MHz]
clocks.applications.memory clocks.applications.mem [MHz]
clocks.default_applications.graphics clocks.default_applications.gr [MHz]
clocks.default_applications.memory clocks.default_applications.mem [MHz]
clocks.max.graphics clocks.max.gr [MHz]
clocks.max.sm [MHz]
clocks.max.memory clocks.max.mem [MHz]
mig.mode.current
mig.mode.pending
gsp.mode.current
gsp.mode.default
c2c.mode
protected_memory.total [MiB]
protected_memory.used [MiB]
protected_memory.free [MiB]
fabric.state
fabric.status
fabric.cliqueId
fabric.clusterUuid
fabric.health.summary
fabric.health.bandwidth
fabric.health.route_recovery_in_progress
fabric.health.route_unhealthy
fabric.health.access_timeout_recovery
fabric.health.incorrect_configuration
fabric.health.partition_assigned
platform.chassis_serial_number
platform.slot_number
platform.tray_index
platform.host_id
platform.peer_type
platform.module_id
platform.gpu_fabric_guid
hostname
bbx.time_run [seconds]
"""

_APPS = """
timestamp
gpu_name
gpu_bus_id
gpu_serial
gpu_uuid
pid
process_name name
used_gpu_memory used_memory [MiB]
"""

#: Fields current drivers no longer answer: they print this instead of a value.
DEPRECATED_TEXT = "Requested functionality has been deprecated"
DEPRECATED = frozenset({
    "display_mode", "power.management", "clocks.applications.graphics",
    "clocks.applications.memory", "clocks.default_applications.graphics",
    "clocks.default_applications.memory",
})


class Field(NamedTuple):
    name: str
    aliases: tuple[str, ...]
    unit: str


def _catalog(text: str) -> dict[str, Field]:
    """Every name a query may use (a field's own and its aliases) -> the field."""
    found: dict[str, Field] = {}
    for line in text.split("\n"):
        words = line.split()
        if not words:
            continue
        unit = words.pop()[1:-1] if words[-1].startswith("[") else ""
        aliases = list(words[1:])
        if words[0].startswith("clocks_event_reasons."):
            # their older names, still accepted
            aliases.append(words[0].replace("clocks_event_reasons.", "clocks_throttle_reasons."))
        field = Field(words[0], tuple(aliases), unit)
        for name in (field.name, *field.aliases):
            found[name] = field
    return found


#: ``--query-gpu``'s fields, by every name they answer to.
GPU_FIELDS = _catalog(_GPU)
#: ``--query-compute-apps``'s fields, by every name they answer to.
APP_FIELDS = _catalog(_APPS)


def help_lines(fields: dict[str, Field], switch: str) -> list[str]:
    """``--help-query-gpu``/``--help-query-compute-apps``: the fields a query accepts."""
    lines = [f'List of valid properties to query for the switch "{switch}":', ""]
    for field in dict.fromkeys(fields.values()):
        names = " or ".join(f'"{n}"' for n in (field.name, *field.aliases))
        lines.append(names + (f" [{field.unit}]" if field.unit else ""))
    return lines
