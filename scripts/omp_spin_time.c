/* How long libgomp's idle pool threads spin before they sleep, at a given GOMP_SPINCOUNT.
 *
 * Runs two empty 2-thread parallel regions separated by a busy gap in the master thread
 * (like the Python work between two kernels of one step) and prints the second region's mean
 * time per gap: about 1 us while the helper thread still spins, tens of us once it has gone
 * to sleep and must be woken (a futex wake). The gap where it jumps is the spin duration.
 *   gcc -O2 -fopenmp scripts/omp_spin_time.c -o /tmp/omp_spin_time
 *   for s in 300000 30000 10000; do echo "GOMP_SPINCOUNT=$s"; GOMP_SPINCOUNT=$s /tmp/omp_spin_time; done
 * (common/openmp_env.py explains why the workers set 30000.) */
#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static volatile double sink;

int main(void) {
  const int gaps_us[] = {20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};
  const int n = sizeof gaps_us / sizeof gaps_us[0], reps = 200;
#pragma omp parallel num_threads(2)
  { sink += omp_get_thread_num(); } /* start the pool before timing */
  for (int g = 0; g < n; g++) {
    double total = 0;
    for (int i = 0; i < reps; i++) {
#pragma omp parallel num_threads(2)
      { sink += 1; }
      double t0 = now_us();
      while (now_us() - t0 < gaps_us[g]) {
      } /* the master is busy; the helper thread waits for the next region */
      double a = now_us();
#pragma omp parallel num_threads(2)
      { sink += 1; }
      total += now_us() - a;
    }
    printf("gap %5d us: next region %6.1f us\n", gaps_us[g], total / reps);
  }
  return 0;
}
