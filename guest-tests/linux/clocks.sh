#!/bin/sh
# clocks.sh: Linux's use of vbts's PC timers beyond the LAPIC and the TSC:
# the HPET (vmm/hpet.h) as a clocksource, and the RTC's alarm (vmm/cmos_rtc.h)
# through ACPI's RTC event and the SCI (vmm/acpi_pm.h), which Linux's rtc-cmos
# uses while the HPET holds IRQ 8 in legacy replacement mode (its
# use_acpi_alarm: an Intel CPU, the HPET on, a BIOS from 2015 or later, as
# vbts's SMBIOS says). Run by init.c (`-- run /bin/sh /clocks.sh`), whose
# verdict is this script's status.
export PATH=/usr/bin:/bin
. /check.sh

cs=/sys/devices/system/clocksource/clocksource0
avail=$(cat $cs/available_clocksource)
check "hpet clocksource" "$(case " $avail " in *" hpet "*) echo 1;; esac)" "available: $avail"

# Time runs on the HPET: the kernel takes it as its clocksource, and uptime
# moves on over a `sleep 1` read through it.
echo hpet > $cs/current_clocksource
now=$(cat $cs/current_clocksource)
set -- $(cat /proc/uptime)
u0=${1%.*}${1#*.}
sleep 1
set -- $(cat /proc/uptime)
u1=${1%.*}${1#*.}
check "time on the hpet" "$([ "$now" = hpet ] && [ "$u1" -gt "$u0" ] && echo 1)" \
  "current_clocksource $now; uptime ${u0}0 ms before sleep 1, ${u1}0 ms after"
echo tsc > $cs/current_clocksource

# The RTC's alarm, 2 s ahead: ACPI's RTC event raises the SCI (IRQ 9, "acpi"
# in /proc/interrupts) and the kernel consumes the alarm (wakealarm empty).
sci() {
  set -- $(grep " acpi$" /proc/interrupts)
  echo "${2:-0}"
}
s0=$(sci)
echo +2 > /sys/class/rtc/rtc0/wakealarm
armed=$(cat /sys/class/rtc/rtc0/wakealarm)
sleep 3
s1=$(sci)
left=$(cat /sys/class/rtc/rtc0/wakealarm)
check "rtc alarm" "$([ -n "$armed" ] && [ -z "$left" ] && [ "$s1" -gt "$s0" ] && echo 1)" \
  "armed for $armed; after 3 s wakealarm '$left', SCIs $s0 -> $s1"
summary
