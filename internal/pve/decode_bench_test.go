package pve

import (
	"strconv"
	"testing"
)

// resources10kBody is a /cluster/resources?type=vm answer of 10 000 VMs as
// PVE writes it: Perl's JSON (0/1 booleans, %.15g floats), data then total
// omitted, a few fields sent as strings the way PVE sometimes does.
func resources10kBody() []byte {
	b := []byte(`{"data":[`)
	for i := 0; i < 10000; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		vmid := 100 + i
		node := "pve" + strconv.Itoa(1+i%6)
		running := i%4 != 0
		b = append(b, `{"id":"qemu/`...)
		b = strconv.AppendInt(b, int64(vmid), 10)
		b = append(b, `","vmid":`...)
		b = strconv.AppendInt(b, int64(vmid), 10)
		b = append(b, `,"node":"`...)
		b = append(b, node...)
		b = append(b, `","type":"qemu","status":"`...)
		if running {
			b = append(b, `running`...)
		} else {
			b = append(b, `stopped`...)
		}
		b = append(b, `","name":"vm-`...)
		b = strconv.AppendInt(b, int64(vmid), 10)
		b = append(b, `.example.org","uptime":`...)
		if running {
			b = strconv.AppendInt(b, int64(3600*24+i*37), 10)
		} else {
			b = append(b, '0')
		}
		b = append(b, `,"template":`...)
		if i%500 == 0 {
			b = append(b, '1')
		} else {
			b = append(b, '0')
		}
		b = append(b, `,"maxcpu":`...)
		b = strconv.AppendInt(b, int64(1+i%8), 10)
		b = append(b, `,"cpu":`...)
		if running {
			b = strconv.AppendFloat(b, float64(i%997+1)/358317.0, 'g', 15, 64)
		} else {
			b = append(b, '0')
		}
		b = append(b, `,"maxmem":`...)
		if i%10 == 3 {
			b = append(b, `"4294967296"`...) // a number PVE stringified
		} else {
			b = strconv.AppendInt(b, int64(1+i%16)<<30, 10)
		}
		b = append(b, `,"mem":`...)
		b = strconv.AppendInt(b, int64(i%16)<<28+int64(i)*4096, 10)
		b = append(b, `,"maxdisk":`...)
		b = strconv.AppendInt(b, int64(32+i%64)<<30, 10)
		b = append(b, `,"disk":0,"netin":`...)
		b = strconv.AppendInt(b, int64(i)*123457, 10)
		b = append(b, `,"netout":`...)
		b = strconv.AppendInt(b, int64(i)*98765, 10)
		b = append(b, `,"diskread":`...)
		b = strconv.AppendInt(b, int64(i)*1<<20, 10)
		b = append(b, `,"diskwrite":`...)
		b = strconv.AppendInt(b, int64(i)*1<<19, 10)
		if i%3 == 0 {
			b = append(b, `,"tags":"prod;web"`...)
		}
		if i%50 == 0 {
			b = append(b, `,"hastate":"started"`...)
		}
		if i%200 == 7 {
			b = append(b, `,"lock":"backup"`...)
		}
		b = append(b, '}')
	}
	return append(b, `]}`...)
}

func BenchmarkDecodeResources10k(b *testing.B) {
	body := resources10kBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		res, err := decodeResourcesBody(body)
		if err != nil || len(res) != 10000 {
			b.Fatalf("%d resources, %v", len(res), err)
		}
	}
}
