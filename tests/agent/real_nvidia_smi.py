"""What NVIDIA's own nvidia-smi answers, recorded from real drivers, for the tests of the
session's nvidia-smi to hold it to: every field ``nvidia-smi --help-query-gpu`` lists (driver
610.57.04), the aliases it lists beside them, the CSV header a query of all of them prints, and
the order of a ``<gpu>`` element's children in ``nvidia-smi -q -x`` (driver 595.84)."""

from __future__ import annotations

#: ``--query-gpu=`` with every field ``--help-query-gpu`` lists, in its order.
QUERY_GPU_FIELDS = (
    "timestamp,driver_version,kmd_version,vgpu_driver_capability.heterogenous_multivGPU,count,"
    "name,serial,uuid,pci.bus_id,pci.domain,pci.bus,pci.device,pci.baseClass,pci.subClass,"
    "pci.device_id,pci.sub_device_id,vgpu_device_capability.fractional_multiVgpu,"
    "vgpu_device_capability.heterogeneous_timeSlice_profile,"
    "vgpu_device_capability.heterogeneous_timeSlice_sizes,"
    "vgpu_device_capability.homogeneous_placements,vgpu_device_capability.mig_timeSlicing,"
    "vgpu_device_capability.mig_timeSlicing_mode,pcie.link.gen.current,"
    "pcie.link.gen.gpucurrent,pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax,"
    "pcie.link.width.current,pcie.link.width.max,index,display_mode,display_attached,"
    "display_active,persistence_mode,addressing_mode,accounting.mode,accounting.buffer_size,"
    "driver_model.current,driver_model.pending,vbios_version,inforom.img,inforom.oem,"
    "inforom.ecc,inforom.pwr,inforom.checksum_validation,gpu_recovery_action,gom.current,"
    "gom.pending,fan.speed,pstate,clocks_event_reasons.supported,clocks_event_reasons.active,"
    "clocks_event_reasons.gpu_idle,clocks_event_reasons.applications_clocks_setting,"
    "clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,"
    "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
    "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sync_boost,"
    "clocks_event_reasons_counters.sw_power_cap,clocks_event_reasons_counters.sync_boost,"
    "clocks_event_reasons_counters.sw_thermal_slowdown,"
    "clocks_event_reasons_counters.hw_thermal_slowdown,"
    "clocks_event_reasons_counters.hw_power_brake_slowdown,memory.total,memory.reserved,"
    "memory.used,memory.free,compute_mode,compute_cap,utilization.gpu,utilization.memory,"
    "utilization.encoder,utilization.decoder,utilization.jpeg,utilization.ofa,"
    "encoder.stats.sessionCount,encoder.stats.averageFps,encoder.stats.averageLatency,"
    "dramEncryption.mode.current,dramEncryption.mode.pending,ecc.mode.current,ecc.mode.pending,"
    "ecc.errors.corrected.volatile.device_memory,ecc.errors.corrected.volatile.dram,"
    "ecc.errors.corrected.volatile.register_file,ecc.errors.corrected.volatile.l1_cache,"
    "ecc.errors.corrected.volatile.l2_cache,ecc.errors.corrected.volatile.texture_memory,"
    "ecc.errors.corrected.volatile.cbu,ecc.errors.corrected.volatile.sram,"
    "ecc.errors.corrected.volatile.total,ecc.errors.corrected.aggregate.device_memory,"
    "ecc.errors.corrected.aggregate.dram,ecc.errors.corrected.aggregate.register_file,"
    "ecc.errors.corrected.aggregate.l1_cache,ecc.errors.corrected.aggregate.l2_cache,"
    "ecc.errors.corrected.aggregate.texture_memory,ecc.errors.corrected.aggregate.cbu,"
    "ecc.errors.corrected.aggregate.sram,ecc.errors.corrected.aggregate.total,"
    "ecc.errors.uncorrected.volatile.device_memory,ecc.errors.uncorrected.volatile.dram,"
    "ecc.errors.uncorrected.volatile.register_file,ecc.errors.uncorrected.volatile.l1_cache,"
    "ecc.errors.uncorrected.volatile.l2_cache,ecc.errors.uncorrected.volatile.texture_memory,"
    "ecc.errors.uncorrected.volatile.cbu,ecc.errors.uncorrected.volatile.sram,"
    "ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.device_memory,"
    "ecc.errors.uncorrected.aggregate.dram,ecc.errors.uncorrected.aggregate.register_file,"
    "ecc.errors.uncorrected.aggregate.l1_cache,ecc.errors.uncorrected.aggregate.l2_cache,"
    "ecc.errors.uncorrected.aggregate.texture_memory,ecc.errors.uncorrected.aggregate.cbu,"
    "ecc.errors.uncorrected.aggregate.sram,ecc.errors.uncorrected.aggregate.total,"
    "ecc.errors.uncorrected.volatile.sram.parity,ecc.errors.uncorrected.volatile.sram.secded,"
    "ecc.errors.uncorrected.aggregate.sram.parity,ecc.errors.uncorrected.aggregate.sram.secded,"
    "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded,"
    "ecc.errors.uncorrected.aggregate.sram.l2,ecc.errors.uncorrected.aggregate.sram.sm,"
    "ecc.errors.uncorrected.aggregate.sram.mcu,ecc.errors.uncorrected.aggregate.sram.pcie,"
    "ecc.errors.uncorrected.aggregate.sram.other,retired_pages.single_bit_ecc.count,"
    "retired_pages.double_bit.count,retired_pages.pending,remapped_rows.correctable,"
    "remapped_rows.correctable_inactive,remapped_rows.uncorrectable,"
    "remapped_rows.uncorrectable_inactive,remapped_rows.pending,remapped_rows.failure,"
    "remapped_rows.histogram.max,remapped_rows.histogram.high,remapped_rows.histogram.partial,"
    "remapped_rows.histogram.low,remapped_rows.histogram.none,temperature.gpu,"
    "temperature.gpu.tlimit,temperature.memory,power.management,power.draw,power.draw.average,"
    "power.draw.instant,power.limit,enforced.power.limit,power.default_limit,power.min_limit,"
    "power.max_limit,module.power.draw.average,module.power.draw.instant,module.power.limit,"
    "module.enforced.power.limit,module.power.default_limit,module.power.min_limit,"
    "module.power.max_limit,gpu.base.current,gpu.base.requested,gpu.base.default,gpu.base.min,"
    "gpu.base.max,power_smoothing.tmp_floor,power_smoothing.tmp_ceil,"
    "power_smoothing.hw_lifetime_remaining_percent,power_smoothing.enabled,"
    "power_smoothing.delayed_power_smoothing_supported,"
    "power_smoothing.soc_power_smoothing_enabled,power_smoothing.priv_level,"
    "power_smoothing.imm_ramp_down,power_smoothing.max_percent_tmp_floor,"
    "power_smoothing.min_percent_tmp_floor,power_smoothing.primary_power_floor,"
    "power_smoothing.secondary_power_floor,power_smoothing.min_primary_floor_activation_offset,"
    "power_smoothing.min_primary_floor_activation_point,power_smoothing.window_multiplier,"
    "power_smoothing.num_preset_profiles,power_smoothing.curr_profile.percent_tmp_floor,"
    "power_smoothing.curr_profile.ramp_up_rate,power_smoothing.curr_profile.ramp_down_rate,"
    "power_smoothing.curr_profile.ramp_down_hysteresis,"
    "power_smoothing.curr_profile.secondary_power_floor,"
    "power_smoothing.curr_profile.primary_floor_act_window_multiplier,"
    "power_smoothing.curr_profile.primary_floor_tar_window_multiplier,"
    "power_smoothing.curr_profile.primary_floor_act_offset,power_smoothing.active_profile,"
    "power_smoothing.admin_override.percent_tmp_floor,"
    "power_smoothing.admin_override.ramp_up_rate,power_smoothing.admin_override.ramp_down_rate,"
    "power_smoothing.admin_override.ramp_down_hysteresis,"
    "power_smoothing.admin_override.secondary_power_floor,"
    "power_smoothing.admin_override.primary_floor_act_window_multiplier,"
    "power_smoothing.admin_override.primary_floor_tar_window_multiplier,"
    "power_smoothing.admin_override.primary_floor_act_offset,edpp_multiplier,"
    "clocks.current.graphics,clocks.current.sm,clocks.current.memory,clocks.current.video,"
    "clocks.applications.graphics,clocks.applications.memory,"
    "clocks.default_applications.graphics,clocks.default_applications.memory,"
    "clocks.max.graphics,clocks.max.sm,clocks.max.memory,mig.mode.current,mig.mode.pending,"
    "gsp.mode.current,gsp.mode.default,c2c.mode,protected_memory.total,protected_memory.used,"
    "protected_memory.free,fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid,"
    "fabric.health.summary,fabric.health.bandwidth,fabric.health.route_recovery_in_progress,"
    "fabric.health.route_unhealthy,fabric.health.access_timeout_recovery,"
    "fabric.health.incorrect_configuration,fabric.health.partition_assigned,"
    "platform.chassis_serial_number,platform.slot_number,platform.tray_index,platform.host_id,"
    "platform.peer_type,platform.module_id,platform.gpu_fabric_guid,hostname,bbx.time_run"
)
#: The header ``--format=csv`` prints for ``QUERY_GPU_FIELDS``.
QUERY_GPU_HEADER = (
    "timestamp, driver_version, kmd_version, vgpu_driver_capability.heterogenous_multivGPU, "
    "count, name, serial, uuid, pci.bus_id, pci.domain, pci.bus, pci.device, pci.baseClass, "
    "pci.subClass, pci.device_id, pci.sub_device_id, "
    "vgpu_device_capability.fractional_multiVgpu, "
    "vgpu_device_capability.heterogeneous_timeSlice_profile, "
    "vgpu_device_capability.heterogeneous_timeSlice_sizes, "
    "vgpu_device_capability.homogeneous_placements, vgpu_device_capability.mig_timeSlicing, "
    "vgpu_device_capability.mig_timeSlicing_mode, pcie.link.gen.current, "
    "pcie.link.gen.gpucurrent, pcie.link.gen.max, pcie.link.gen.gpumax, pcie.link.gen.hostmax, "
    "pcie.link.width.current, pcie.link.width.max, index, display_mode, display_attached, "
    "display_active, persistence_mode, addressing_mode, accounting.mode, "
    "accounting.buffer_size, driver_model.current, driver_model.pending, vbios_version, "
    "inforom.img, inforom.oem, inforom.ecc, inforom.pwr, inforom.checksum_validation, "
    "gpu_recovery_action, gom.current, gom.pending, fan.speed [%], pstate, "
    "clocks_event_reasons.supported, clocks_event_reasons.active, "
    "clocks_event_reasons.gpu_idle, clocks_event_reasons.applications_clocks_setting, "
    "clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown, "
    "clocks_event_reasons.hw_thermal_slowdown, clocks_event_reasons.hw_power_brake_slowdown, "
    "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.sync_boost, "
    "clocks_event_reasons_counters.sw_power_cap [us], "
    "clocks_event_reasons_counters.sync_boost [us], "
    "clocks_event_reasons_counters.sw_thermal_slowdown [us], "
    "clocks_event_reasons_counters.hw_thermal_slowdown [us], "
    "clocks_event_reasons_counters.hw_power_brake_slowdown [us], memory.total [MiB], "
    "memory.reserved [MiB], memory.used [MiB], memory.free [MiB], compute_mode, compute_cap, "
    "utilization.gpu [%], utilization.memory [%], utilization.encoder [%], "
    "utilization.decoder [%], utilization.jpeg [%], utilization.ofa [%], "
    "encoder.stats.sessionCount, encoder.stats.averageFps, encoder.stats.averageLatency, "
    "dramEncryption.mode.current, dramEncryption.mode.pending, ecc.mode.current, "
    "ecc.mode.pending, ecc.errors.corrected.volatile.device_memory, "
    "ecc.errors.corrected.volatile.dram, ecc.errors.corrected.volatile.register_file, "
    "ecc.errors.corrected.volatile.l1_cache, ecc.errors.corrected.volatile.l2_cache, "
    "ecc.errors.corrected.volatile.texture_memory, ecc.errors.corrected.volatile.cbu, "
    "ecc.errors.corrected.volatile.sram, ecc.errors.corrected.volatile.total, "
    "ecc.errors.corrected.aggregate.device_memory, ecc.errors.corrected.aggregate.dram, "
    "ecc.errors.corrected.aggregate.register_file, ecc.errors.corrected.aggregate.l1_cache, "
    "ecc.errors.corrected.aggregate.l2_cache, ecc.errors.corrected.aggregate.texture_memory, "
    "ecc.errors.corrected.aggregate.cbu, ecc.errors.corrected.aggregate.sram, "
    "ecc.errors.corrected.aggregate.total, ecc.errors.uncorrected.volatile.device_memory, "
    "ecc.errors.uncorrected.volatile.dram, ecc.errors.uncorrected.volatile.register_file, "
    "ecc.errors.uncorrected.volatile.l1_cache, ecc.errors.uncorrected.volatile.l2_cache, "
    "ecc.errors.uncorrected.volatile.texture_memory, ecc.errors.uncorrected.volatile.cbu, "
    "ecc.errors.uncorrected.volatile.sram, ecc.errors.uncorrected.volatile.total, "
    "ecc.errors.uncorrected.aggregate.device_memory, ecc.errors.uncorrected.aggregate.dram, "
    "ecc.errors.uncorrected.aggregate.register_file, "
    "ecc.errors.uncorrected.aggregate.l1_cache, ecc.errors.uncorrected.aggregate.l2_cache, "
    "ecc.errors.uncorrected.aggregate.texture_memory, ecc.errors.uncorrected.aggregate.cbu, "
    "ecc.errors.uncorrected.aggregate.sram, ecc.errors.uncorrected.aggregate.total, "
    "ecc.errors.uncorrected.volatile.sram.parity, ecc.errors.uncorrected.volatile.sram.secded, "
    "ecc.errors.uncorrected.aggregate.sram.parity, "
    "ecc.errors.uncorrected.aggregate.sram.secded, "
    "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded, "
    "ecc.errors.uncorrected.aggregate.sram.l2, ecc.errors.uncorrected.aggregate.sram.sm, "
    "ecc.errors.uncorrected.aggregate.sram.mcu, ecc.errors.uncorrected.aggregate.sram.pcie, "
    "ecc.errors.uncorrected.aggregate.sram.other, retired_pages.single_bit_ecc.count, "
    "retired_pages.double_bit.count, retired_pages.pending, remapped_rows.correctable, "
    "remapped_rows.correctable_inactive, remapped_rows.uncorrectable, "
    "remapped_rows.uncorrectable_inactive, remapped_rows.pending, remapped_rows.failure, "
    "remapped_rows.histogram.max, remapped_rows.histogram.high, "
    "remapped_rows.histogram.partial, remapped_rows.histogram.low, "
    "remapped_rows.histogram.none, temperature.gpu, temperature.gpu.tlimit, "
    "temperature.memory, power.management, power.draw [W], power.draw.average [W], "
    "power.draw.instant [W], power.limit [W], enforced.power.limit [W], "
    "power.default_limit [W], power.min_limit [W], power.max_limit [W], "
    "module.power.draw.average [W], module.power.draw.instant [W], module.power.limit [W], "
    "module.enforced.power.limit [W], module.power.default_limit [W], "
    "module.power.min_limit [W], module.power.max_limit [W], gpu.base.current [W], "
    "gpu.base.requested [W], gpu.base.default [W], gpu.base.min [W], gpu.base.max [W], "
    "power_smoothing.tmp_floor [W], power_smoothing.tmp_ceil [W], "
    "power_smoothing.hw_lifetime_remaining_percent [%], power_smoothing.enabled, "
    "power_smoothing.delayed_power_smoothing_supported, "
    "power_smoothing.soc_power_smoothing_enabled, power_smoothing.priv_level, "
    "power_smoothing.imm_ramp_down, power_smoothing.max_percent_tmp_floor [%], "
    "power_smoothing.min_percent_tmp_floor [%], power_smoothing.primary_power_floor [W], "
    "power_smoothing.secondary_power_floor [W], "
    "power_smoothing.min_primary_floor_activation_offset [W], "
    "power_smoothing.min_primary_floor_activation_point [W], "
    "power_smoothing.window_multiplier [ms], power_smoothing.num_preset_profiles, "
    "power_smoothing.curr_profile.percent_tmp_floor [%], "
    "power_smoothing.curr_profile.ramp_up_rate [W/s], "
    "power_smoothing.curr_profile.ramp_down_rate [W/s], "
    "power_smoothing.curr_profile.ramp_down_hysteresis [ms], "
    "power_smoothing.curr_profile.secondary_power_floor [W], "
    "power_smoothing.curr_profile.primary_floor_act_window_multiplier, "
    "power_smoothing.curr_profile.primary_floor_tar_window_multiplier, "
    "power_smoothing.curr_profile.primary_floor_act_offset [W], "
    "power_smoothing.active_profile, power_smoothing.admin_override.percent_tmp_floor [%], "
    "power_smoothing.admin_override.ramp_up_rate [W/s], "
    "power_smoothing.admin_override.ramp_down_rate [W/s], "
    "power_smoothing.admin_override.ramp_down_hysteresis [ms], "
    "power_smoothing.admin_override.secondary_power_floor [W], "
    "power_smoothing.admin_override.primary_floor_act_window_multiplier, "
    "power_smoothing.admin_override.primary_floor_tar_window_multiplier, "
    "power_smoothing.admin_override.primary_floor_act_offset [W], edpp_multiplier [%], "
    "clocks.current.graphics [MHz], clocks.current.sm [MHz], clocks.current.memory [MHz], "
    "clocks.current.video [MHz], clocks.applications.graphics [MHz], "
    "clocks.applications.memory [MHz], clocks.default_applications.graphics [MHz], "
    "clocks.default_applications.memory [MHz], clocks.max.graphics [MHz], clocks.max.sm [MHz], "
    "clocks.max.memory [MHz], mig.mode.current, mig.mode.pending, gsp.mode.current, "
    "gsp.mode.default, c2c.mode, protected_memory.total [MiB], protected_memory.used [MiB], "
    "protected_memory.free [MiB], fabric.state, fabric.status, fabric.cliqueId, "
    "fabric.clusterUuid, fabric.health.summary, fabric.health.bandwidth, "
    "fabric.health.route_recovery_in_progress, fabric.health.route_unhealthy, "
    "fabric.health.access_timeout_recovery, fabric.health.incorrect_configuration, "
    "fabric.health.partition_assigned, platform.chassis_serial_number, platform.slot_number, "
    "platform.tray_index, platform.host_id, platform.peer_type, platform.module_id, "
    "platform.gpu_fabric_guid, hostname, bbx.time_run [seconds]"
)
#: The other names ``--help-query-gpu`` lists for a field: alias -> the field's own name.
QUERY_GPU_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "inforom.image": "inforom.img",
    "inforom.power": "inforom.pwr",
    "gpu_operation_mode.current": "gom.current",
    "gpu_operation_mode.pending": "gom.pending",
    "clocks_throttle_reasons.supported": "clocks_event_reasons.supported",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "clocks_throttle_reasons.gpu_idle": "clocks_event_reasons.gpu_idle",
    "clocks_throttle_reasons.applications_clocks_setting":
        "clocks_event_reasons.applications_clocks_setting",
    "clocks_throttle_reasons.sw_power_cap": "clocks_event_reasons.sw_power_cap",
    "clocks_throttle_reasons.hw_slowdown": "clocks_event_reasons.hw_slowdown",
    "clocks_throttle_reasons.hw_thermal_slowdown": "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.hw_power_brake_slowdown":
        "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown": "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_throttle_reasons.sync_boost": "clocks_event_reasons.sync_boost",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
    "remapped_rows.sbe": "remapped_rows.correctable",
    "remapped_rows.dbe": "remapped_rows.uncorrectable",
    "gpu.power.draw.average": "power.draw.average",
    "gpu.power.draw.instant": "power.draw.instant",
    "gpu.power.requested_limit": "power.limit",
    "gpu.power.current_limit": "enforced.power.limit",
    "gpu.power.default_limit": "power.default_limit",
    "gpu.power.min_limit": "power.min_limit",
    "gpu.power.max_limit": "power.max_limit",
    "module.power.requested_limit": "module.power.limit",
    "module.power.current_limit": "module.enforced.power.limit",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.applications.gr": "clocks.applications.graphics",
    "clocks.applications.mem": "clocks.applications.memory",
    "clocks.default_applications.gr": "clocks.default_applications.graphics",
    "clocks.default_applications.mem": "clocks.default_applications.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
}
#: A ``<gpu>`` element's children in ``nvidia-smi -q -x``, in the order nvidia-smi writes them.
XML_GPU_CHILDREN = (
    "product_name product_brand product_architecture display_mode display_attached "
    "display_active persistence_mode addressing_mode mig_mode mig_devices accounting_mode "
    "accounting_mode_buffer_size driver_model serial uuid pdi minor_number vbios_version "
    "multigpu_board board_id board_part_number gpu_part_number gpu_fru_part_number "
    "platformInfo inforom_version inforom_bbx_flush gpu_operation_mode c2c_mode "
    "gpu_virtualization_mode gpu_recovery_action gsp_firmware_version ibmnpu pci fan_speed "
    "performance_state clocks_event_reasons clocks_event_reasons_counters "
    "sparse_operation_mode fb_memory_usage bar1_memory_usage cc_protected_memory_usage "
    "compute_mode utilization encoder_stats fbc_stats dram_encryption_mode ecc_mode ecc_errors "
    "retired_pages remapped_rows temperature supported_gpu_target_temp gpu_power_readings "
    "gpu_memory_power_readings module_power_readings power_smoothing power_profiles "
    "edpp_multiplier clocks applications_clocks default_applications_clocks deferred_clocks "
    "max_clocks max_customer_boost_clocks clock_policy fabric supported_clocks processes "
    "accounted_processes capabilities"
).split()
